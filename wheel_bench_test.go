package ax

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The benchmarks run the wheel with its defaults (1ms tick, 1024 slots) and
// about a million entries present, spread uniformly over the next hour, as a
// busy scheduler's lookahead could hold.
const (
	benchEntries = 1 << 20
	benchSpread  = time.Hour
	// benchBatch is how many operations run between untimed clean-ups that
	// keep the population steady.
	benchBatch = 1 << 16
)

// benchOffsets returns n pseudo-random offsets within benchSpread, fixed
// so that runs compare.
func benchOffsets(n int) []time.Duration {
	rng := rand.New(rand.NewPCG(1, 2))
	offs := make([]time.Duration, n)
	for i := range offs {
		offs[i] = time.Duration(rng.Int64N(int64(benchSpread)))
	}
	return offs
}

// benchWheel returns a default wheel at t0 holding benchEntries entries.
func benchWheel(b *testing.B) *wheel[int] {
	b.Helper()
	w := newWheel[int](newFakeClock(), 0, 0)
	for i, off := range benchOffsets(benchEntries) {
		w.add(t0.Add(off), i)
	}
	return w
}

// BenchmarkWheelAdd measures add with a million entries present. Every
// benchBatch adds, the batch is cancelled, untimed, so the population stays
// near a million.
func BenchmarkWheelAdd(b *testing.B) {
	w := benchWheel(b)
	offs := benchOffsets(benchBatch)
	added := make([]*wheelEntry[int], benchBatch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		j := i % benchBatch
		if j == 0 && i > 0 {
			b.StopTimer()
			for _, e := range added {
				w.cancel(e)
			}
			b.StartTimer()
		}
		added[j] = w.add(t0.Add(offs[j]), i)
	}
}

// BenchmarkWheelCancel measures cancel of pending entries with a million
// others present. Every benchBatch cancels, the victims are added back,
// untimed.
func BenchmarkWheelCancel(b *testing.B) {
	w := benchWheel(b)
	offs := benchOffsets(benchBatch)
	victims := make([]*wheelEntry[int], benchBatch)
	refill := func() {
		for j := range victims {
			victims[j] = w.add(t0.Add(offs[j]), j)
		}
	}
	refill()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		j := i % benchBatch
		if j == 0 && i > 0 {
			b.StopTimer()
			refill()
			b.StartTimer()
		}
		if !w.cancel(victims[j]) {
			b.Fatal("cancel of a pending entry failed")
		}
	}
}

// BenchmarkWheelExpire measures the cost per fired entry of draining a wheel
// that starts with a million entries over an hour, advancing bucket by
// bucket as run does (cascades included). When it runs dry it is refilled,
// untimed. One op is one entry fired.
func BenchmarkWheelExpire(b *testing.B) {
	w := benchWheel(b)
	offs := benchOffsets(benchEntries)
	var batch []int
	b.ReportAllocs()
	b.ResetTimer()
	for fired := 0; fired < b.N; {
		next, ok := w.next()
		if !ok {
			b.StopTimer()
			now := w.timeOf(w.cur)
			for i, off := range offs {
				w.add(now.Add(off), i)
			}
			b.StartTimer()
			continue
		}
		batch = w.advance(next, batch[:0])
		fired += len(batch)
	}
}
