package ax

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the package leaks a goroutine (STYLE.md,
// "Every goroutine has a stop signal and a wait"). It is the package's only
// TestMain: other test files of package ax rely on it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the fake clocks' starting time, and so the tests' wheel origin.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a clock that moves only when told to, counting what the
// wheel asks of its timers so that tests can assert "one timer, armed only
// for the earliest bucket". Safe for concurrent use.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	stats  timerStats
}

// timerStats counts timer operations: how often the wheel created, re-armed
// and stopped a timer, and how often a timer woke it.
type timerStats struct {
	created, resets, stops, fires int
}

// newFakeClock returns a fakeClock reading t0.
func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

// Now implements clock.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements clock.
func (c *fakeClock) NewTimer(d time.Duration) clockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clk: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.stats.created++
	t.when, t.active = c.now.Add(d), true
	c.fireLocked()
	return t
}

// set moves the clock to now (never back) and fires the timers due by then.
func (c *fakeClock) set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.After(c.now) {
		c.now = now
	}
	c.fireLocked()
}

// nextDeadline returns the earliest deadline of an armed timer.
func (c *fakeClock) nextDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var when time.Time
	ok := false
	for _, t := range c.timers {
		if t.active && (!ok || t.when.Before(when)) {
			when, ok = t.when, true
		}
	}
	return when, ok
}

// counts returns the timer statistics so far.
func (c *fakeClock) counts() timerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// fireLocked sends on the channel of every armed timer whose deadline has
// come. The channel has room: a timer is re-armed only by Reset, which
// drains it.
func (c *fakeClock) fireLocked() {
	for _, t := range c.timers {
		if t.active && !t.when.After(c.now) {
			t.active = false
			c.stats.fires++
			t.ch <- c.now
		}
	}
}

// fakeTimer is a fakeClock's timer, with Go 1.23 semantics: Reset and Stop
// discard an undelivered value.
type fakeTimer struct {
	clk    *fakeClock
	ch     chan time.Time
	when   time.Time
	active bool
}

// C implements clockTimer.
func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Reset implements clockTimer.
func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.resets++
	was := t.drainLocked()
	t.when, t.active = c.now.Add(d), true
	c.fireLocked()
	return was
}

// Stop implements clockTimer.
func (t *fakeTimer) Stop() bool {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.stops++
	return t.drainLocked()
}

// drainLocked disarms t, drops an undelivered value and reports whether t
// was armed.
func (t *fakeTimer) drainLocked() bool {
	was := t.active
	t.active = false
	select {
	case <-t.ch:
	default:
	}
	return was
}

// drain advances w to now and returns what fired.
func drain(w *wheel[int], now time.Time) []int {
	return w.advance(now, nil)
}

// roundUp returns t0+off rounded up to the tick: when the entry must fire.
func roundUp(off, tick time.Duration) time.Time {
	return t0.Add((off + tick - 1) / tick * tick)
}

func TestWheelFiresAtRoundedTimeNeverBefore(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name string
		tick time.Duration
		size int
		off  time.Duration
	}{
		{"1ns", time.Millisecond, 64, time.Nanosecond},
		{"one tick", time.Millisecond, 64, time.Millisecond},
		{"between ticks", time.Millisecond, 64, 1500 * time.Microsecond},
		{"last slot of level 0", time.Millisecond, 64, 63 * time.Millisecond},
		{"first slot of level 1", time.Millisecond, 64, 64 * time.Millisecond},
		{"level 1", time.Millisecond, 64, 65*time.Millisecond + 1},
		{"level 2", time.Millisecond, 64, 4097 * time.Millisecond},
		{"hours ahead", time.Millisecond, 64, 3*time.Hour + 7*time.Millisecond},
		{"40 days ahead", time.Millisecond, 1024, 40*day + 1},
		{"290 years ahead", time.Millisecond, 512, 290 * 365 * day},
		{"tiny wheel", 7 * time.Millisecond, 2, 10*time.Second + 3},
		{"nanosecond ticks", time.Nanosecond, 3, 5*time.Hour + 1},
		{"default tick and size", 0, 0, 17*time.Minute + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWheel[int](newFakeClock(), tt.tick, tt.size)
			due := roundUp(tt.off, w.tick)
			w.add(t0.Add(tt.off), 1)

			if got := drain(w, t0.Add(tt.off-1)); len(got) != 0 {
				t.Fatalf("fired %v 1ns before its time", got)
			}
			if got := drain(w, due.Add(-1)); len(got) != 0 {
				t.Fatalf("fired %v 1ns before its rounded-up time", got)
			}
			if got := drain(w, due); !slices.Equal(got, []int{1}) {
				t.Fatalf("at its rounded-up time fired %v, want [1]", got)
			}
			if _, ok := w.next(); ok || w.len() != 0 {
				t.Fatalf("after firing: next ok=%v len=%d, want an empty wheel", ok, w.len())
			}
		})
	}
}

// stepper is a way to move a wheel from t0 to a time, firing on the way.
type stepper func(w *wheel[int], to time.Time) []int

var steppers = map[string]stepper{
	"one jump": func(w *wheel[int], to time.Time) []int {
		return w.advance(to, nil)
	},
	"tick by tick": func(w *wheel[int], to time.Time) []int {
		var got []int
		for now := t0; !now.After(to); now = now.Add(w.tick) {
			got = w.advance(now, got)
		}
		return got
	},
	"bucket by bucket, like run": func(w *wheel[int], to time.Time) []int {
		var got []int
		for next, ok := w.next(); ok && !next.After(to); next, ok = w.next() {
			got = w.advance(next, got)
		}
		return w.advance(to, got)
	},
}

func TestWheelOrderAcrossLevels(t *testing.T) {
	// Offsets in ms from t0 with a 4-slot wheel: levels span 4, 16, 64,
	// 256 ... ticks, so these sit on levels 0 to 6. Value = index.
	offsets := []time.Duration{
		5000, 3, 70, 3, 1, 260, 17, 4096, 70, 2, 1000, 16, 15, 4, 5000, 64, 63, 1,
	}
	for name, step := range steppers {
		t.Run(name, func(t *testing.T) {
			w := newWheel[int](newFakeClock(), time.Millisecond, 4)
			for i, off := range offsets {
				w.add(t0.Add(off*time.Millisecond), i)
			}
			want := make([]int, len(offsets))
			for i := range want {
				want[i] = i
			}
			slices.SortStableFunc(want, func(a, b int) int {
				return int(offsets[a] - offsets[b])
			})
			if got := step(w, t0.Add(5*time.Second)); !slices.Equal(got, want) {
				t.Fatalf("fired %v, want %v", got, want)
			}
		})
	}
}

func TestWheelSameTickKeepsInsertionOrderAcrossLevels(t *testing.T) {
	// With 4 slots, A (at 40ms, added at 0) lands on level 2 in the bucket
	// expiring at 32. B (same time, added at 30) lands on level 1 in the
	// bucket expiring at 40, and at 32 A cascades into that bucket behind
	// B. They must still fire A first.
	for name, step := range steppers {
		t.Run(name, func(t *testing.T) {
			w := newWheel[int](newFakeClock(), time.Millisecond, 4)
			const a, b = 1, 2
			w.add(t0.Add(40*time.Millisecond), a)
			if got := drain(w, t0.Add(30*time.Millisecond)); len(got) != 0 {
				t.Fatalf("fired %v at 30ms", got)
			}
			w.add(t0.Add(40*time.Millisecond), b)
			if got := step(w, t0.Add(40*time.Millisecond)); !slices.Equal(got, []int{a, b}) {
				t.Fatalf("fired %v, want [%d %d]", got, a, b)
			}
		})
	}
}

func TestWheelCascadesFromOverflowLevels(t *testing.T) {
	// Entries hours and days ahead reach level 0 through every level, firing
	// exactly at their rounded time, with one advance per non-empty bucket.
	w := newWheel[int](newFakeClock(), time.Millisecond, 64)
	offsets := []time.Duration{
		2*time.Hour + 3*time.Millisecond + 1,
		5 * time.Hour,
		26*time.Hour + 59*time.Minute + 999*time.Millisecond,
		30 * 24 * time.Hour,
	}
	for i, off := range offsets {
		w.add(t0.Add(off), i)
	}
	var firedAt []time.Time
	advances := 0
	for next, ok := w.next(); ok; next, ok = w.next() {
		advances++
		for range w.advance(next, nil) {
			firedAt = append(firedAt, next)
		}
	}
	want := make([]time.Time, len(offsets))
	for i, off := range offsets {
		want[i] = roundUp(off, time.Millisecond)
	}
	if !slices.EqualFunc(firedAt, want, time.Time.Equal) {
		t.Fatalf("fired at %v, want %v", firedAt, want)
	}
	// Each entry needs at most one advance per level it cascades through
	// (levels 0 to 4 for 30 days at 64 slots of 1ms).
	if maxAdvances := 5 * len(offsets); advances > maxAdvances {
		t.Fatalf("took %d advances over %d entries, want at most %d", advances, len(offsets), maxAdvances)
	}
}

func TestWheelCancel(t *testing.T) {
	w := newWheel[int](newFakeClock(), time.Millisecond, 8)
	kept := w.add(t0.Add(5*time.Millisecond), 1)
	cancelled := w.add(t0.Add(5*time.Millisecond), 2) // same bucket as kept
	far := w.add(t0.Add(time.Hour), 3)
	pastDue := w.add(t0.Add(-time.Second), 4)

	for _, e := range []*wheelEntry[int]{cancelled, far, pastDue} {
		if !w.cancel(e) {
			t.Fatalf("cancel of pending entry %d = false, want true", e.value)
		}
		if w.cancel(e) {
			t.Fatalf("second cancel of entry %d = true, want false", e.value)
		}
	}
	if w.cancel(nil) {
		t.Fatal("cancel(nil) = true, want false")
	}
	if got := drain(w, t0.Add(2*time.Hour)); !slices.Equal(got, []int{1}) {
		t.Fatalf("fired %v, want [1]", got)
	}
	if w.cancel(kept) {
		t.Fatal("cancel after fire = true, want false")
	}
	if w.len() != 0 {
		t.Fatalf("len = %d, want 0", w.len())
	}
}

func TestWheelNextSkipsEmptyBuckets(t *testing.T) {
	w := newWheel[int](newFakeClock(), time.Millisecond, 8)
	if _, ok := w.next(); ok {
		t.Fatal("empty wheel: next ok, want none")
	}
	early := w.add(t0.Add(3*time.Millisecond), 1)
	w.add(t0.Add(time.Second), 2)
	if got, _ := w.next(); !got.Equal(t0.Add(3 * time.Millisecond)) {
		t.Fatalf("next = %v, want t0+3ms", got.Sub(t0))
	}
	w.cancel(early)
	// 1s at 8 slots of 1ms: level 3 (512ms slots), bucket starting at 512ms.
	if got, _ := w.next(); !got.Equal(t0.Add(512 * time.Millisecond)) {
		t.Fatalf("after cancelling the earliest, next = %v, want t0+512ms", got.Sub(t0))
	}
	if got := drain(w, t0.Add(512*time.Millisecond)); len(got) != 0 {
		t.Fatalf("cascade fired %v", got)
	}
	// At 512ms, 1000ms cascades to level 2 (64ms slots), whose window now
	// starts at 512ms: the bucket starting at 960ms.
	if got, _ := w.next(); !got.Equal(t0.Add(960 * time.Millisecond)) {
		t.Fatalf("after the cascade, next = %v, want t0+960ms", got.Sub(t0))
	}
}

func TestWheelManyEntriesInOneBucket(t *testing.T) {
	w := newWheel[int](newFakeClock(), time.Millisecond, 64)
	const n = 10000
	var want []int
	// Half share one tick; half share one level-1 bucket (ticks 640..703),
	// added in descending time so the bucket's list is out of time order.
	for i := range n / 2 {
		w.add(t0.Add(100*time.Millisecond), i)
	}
	for i := range n / 2 {
		w.add(t0.Add(time.Duration(703-i%64)*time.Millisecond), n/2+i)
	}
	for i := range n / 2 {
		want = append(want, i)
	}
	for tick := 640; tick <= 703; tick++ {
		for i := range n / 2 {
			if 703-i%64 == tick {
				want = append(want, n/2+i)
			}
		}
	}
	if got := drain(w, t0.Add(time.Second)); !slices.Equal(got, want) {
		t.Fatalf("fired %d values, not in (time, insertion) order", len(got))
	}
}

func TestWheelPastDueFiresAtNextAdvance(t *testing.T) {
	w := newWheel[int](newFakeClock(), time.Millisecond, 16)
	now := t0.Add(10 * time.Second)
	drain(w, now)

	w.add(now.Add(time.Nanosecond), 5) // rounds up to the next tick: not due
	w.add(t0.Add(5*time.Second), 3)
	w.add(now, 4)
	w.add(t0, 2)
	w.add(t0.Add(-time.Hour), 1)
	if next, ok := w.next(); !ok || next.After(now) {
		t.Fatalf("next = %v, %v; want a time not after now", next, ok)
	}
	if got := drain(w, now); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("fired %v, want [1 2 3 4]", got)
	}
	if got := drain(w, now.Add(time.Millisecond)); !slices.Equal(got, []int{5}) {
		t.Fatalf("a tick later fired %v, want [5]", got)
	}
}

func TestWheelPastDueWaitsForItsTimeWhenNowGoesBack(t *testing.T) {
	// A caller passing an older now (it should not) still never fires an
	// entry early.
	w := newWheel[int](newFakeClock(), time.Millisecond, 16)
	drain(w, t0.Add(time.Second))
	w.add(t0.Add(500*time.Millisecond), 1)
	if got := drain(w, t0.Add(100*time.Millisecond)); len(got) != 0 {
		t.Fatalf("fired %v at 100ms, before its time", got)
	}
	if got := drain(w, t0.Add(500*time.Millisecond)); !slices.Equal(got, []int{1}) {
		t.Fatalf("fired %v at 500ms, want [1]", got)
	}
}

func TestWheelAddIfAbsent(t *testing.T) {
	w := newWheel[int](newFakeClock(), time.Millisecond, 16)
	at := t0.Add(50 * time.Millisecond)

	e1, added := w.addIfAbsent(at, 1)
	if !added {
		t.Fatal("first addIfAbsent: added = false")
	}
	// Same tick (49.5ms rounds up to 50ms): deduplicated.
	if e, added := w.addIfAbsent(at.Add(-500*time.Microsecond), 2); added || e != e1 {
		t.Fatalf("same tick: got (%v, %v), want the first entry and false", e.value, added)
	}
	// Another tick, and plain add, are separate.
	if _, added := w.addIfAbsent(at.Add(time.Millisecond), 3); !added {
		t.Fatal("next tick: added = false")
	}
	w.add(at, 4)

	w.cancel(e1)
	if _, added := w.addIfAbsent(at, 5); !added {
		t.Fatal("after cancel: added = false")
	}
	if got := drain(w, at.Add(time.Millisecond)); !slices.Equal(got, []int{4, 5, 3}) {
		t.Fatalf("fired %v, want [4 5 3]", got)
	}
	if _, added := w.addIfAbsent(at, 6); !added {
		t.Fatal("after fire: added = false")
	}
	if len(w.byTick) != 1 {
		t.Fatalf("dedupe index holds %d ticks, want 1 (pending entries only)", len(w.byTick))
	}
}

// recorder collects what a run loop fires, with the clock's time.
type recorder struct {
	clk     clock
	mu      sync.Mutex
	batches []firing
}

// firing is one call of fire: when, and with what.
type firing struct {
	at     time.Duration // since t0
	values []int
}

// fire is the run loop's callback.
func (r *recorder) fire(vs []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, firing{r.clk.Now().Sub(t0), slices.Clone(vs)})
}

// got returns the firings so far.
func (r *recorder) got() []firing {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// startRun runs w.run in a goroutine and returns its stop: cancel, then
// wait for the goroutine to return.
func startRun(w *wheel[int], fire func([]int)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, fire)
	}()
	return func() {
		cancel()
		<-done
	}
}

// stepTo moves clk to to through every timer deadline on the way, letting
// the bubble's goroutines settle at each, as real time would.
func stepTo(clk *fakeClock, to time.Time) {
	synctest.Wait()
	for when, ok := clk.nextDeadline(); ok && !when.After(to); when, ok = clk.nextDeadline() {
		clk.set(when)
		synctest.Wait()
	}
	clk.set(to)
	synctest.Wait()
}

func equalFirings(a, b []firing) bool {
	return slices.EqualFunc(a, b, func(x, y firing) bool {
		return x.at == y.at && slices.Equal(x.values, y.values)
	})
}

func TestWheelRunDeliversExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		w := newWheel[int](clk, time.Millisecond, 64)
		rec := &recorder{clk: clk}
		stop := startRun(w, rec.fire)
		defer stop()

		w.add(t0.Add(5*time.Millisecond), 1)
		w.add(t0.Add(5*time.Millisecond), 2)
		w.add(t0.Add(69*time.Millisecond+1), 3)
		w.add(t0.Add(10*time.Second), 4)
		stepTo(clk, t0.Add(time.Minute))

		want := []firing{
			{5 * time.Millisecond, []int{1, 2}},
			{70 * time.Millisecond, []int{3}},
			{10 * time.Second, []int{4}},
		}
		if got := rec.got(); !equalFirings(got, want) {
			t.Fatalf("fired %v, want %v", got, want)
		}
	})
}

func TestWheelRunArmsOneTimerForEarliestBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		w := newWheel[int](clk, time.Millisecond, 64)
		rec := &recorder{clk: clk}
		stop := startRun(w, rec.fire)
		defer stop()
		check := func(step string, want timerStats) {
			t.Helper()
			synctest.Wait()
			if got := clk.counts(); got != want {
				t.Fatalf("%s: timer stats %+v, want %+v", step, got, want)
			}
		}

		check("empty wheel", timerStats{})
		// 64 slots of 1ms: 10s is on level 2 (4.096s slots), bucket at 8.192s.
		w.add(t0.Add(10*time.Second), 10)
		check("first entry", timerStats{created: 1})
		w.add(t0.Add(9*time.Second), 9) // same bucket
		w.add(t0.Add(20*time.Second), 20)
		check("later entries", timerStats{created: 1})
		early := w.add(t0.Add(time.Second), 1)
		check("earlier entry", timerStats{created: 1, resets: 1})
		w.cancel(early)
		check("earliest cancelled", timerStats{created: 1, resets: 2})

		stepTo(clk, t0.Add(30*time.Second))
		// Wake-ups: 8.192s (cascade), 8.96s (cascade), 9s (fire),
		// 9.984s (cascade), 10s (fire), 16.384s, 19.968s (cascades),
		// 20s (fire): 8 in 30s, each followed by a re-arm but the last.
		check("after 30s", timerStats{created: 1, resets: 9, fires: 8})
		want := []firing{
			{9 * time.Second, []int{9}},
			{10 * time.Second, []int{10}},
			{20 * time.Second, []int{20}},
		}
		if got := rec.got(); !equalFirings(got, want) {
			t.Fatalf("fired %v, want %v", got, want)
		}

		e := w.add(t0.Add(time.Minute), 60)
		check("entry added", timerStats{created: 1, resets: 10, fires: 8})
		w.cancel(e)
		check("entry cancelled", timerStats{created: 1, resets: 10, stops: 1, fires: 8})
		stepTo(clk, t0.Add(time.Hour))
		check("an idle hour", timerStats{created: 1, resets: 10, stops: 1, fires: 8})
	})
}

func TestWheelRunFireMayAddAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		w := newWheel[int](clk, time.Millisecond, 64)
		rec := &recorder{clk: clk}
		var victim *wheelEntry[int]
		stop := startRun(w, func(vs []int) {
			rec.fire(vs)
			if vs[0] == 1 {
				w.add(clk.Now(), 2)                         // already due
				w.add(clk.Now().Add(5*time.Millisecond), 3) // later
				w.cancel(victim)
			}
		})
		defer stop()

		w.add(t0.Add(time.Millisecond), 1)
		victim = w.add(t0.Add(2*time.Millisecond), 4)
		stepTo(clk, t0.Add(time.Second))
		want := []firing{
			{time.Millisecond, []int{1}},
			{time.Millisecond, []int{2}},
			{6 * time.Millisecond, []int{3}},
		}
		if got := rec.got(); !equalFirings(got, want) {
			t.Fatalf("fired %v, want %v", got, want)
		}
	})
}

func TestWheelRunStopAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		w := newWheel[int](clk, time.Millisecond, 64)
		rec := &recorder{clk: clk}
		w.add(t0.Add(time.Second), 1)
		w.add(t0.Add(time.Minute), 2)

		stop := startRun(w, rec.fire)
		stepTo(clk, t0.Add(2*time.Second))
		stop() // with an entry pending and a timer armed

		func() {
			defer func() {
				if recover() == nil {
					t.Error("second concurrent run did not panic")
				}
			}()
			stop := startRun(w, rec.fire)
			defer stop()
			synctest.Wait()
			w.run(context.Background(), rec.fire)
		}()

		clk.set(t0.Add(time.Hour)) // nothing runs the wheel
		stop = startRun(w, rec.fire)
		synctest.Wait()
		stop()
		want := []firing{{time.Second, []int{1}}, {time.Hour, []int{2}}}
		if got := rec.got(); !equalFirings(got, want) {
			t.Fatalf("fired %v, want %v", got, want)
		}
	})
}

func TestWheelRunSystemClock(t *testing.T) {
	// In a synctest bubble, time.Now and time.Timer follow the bubble's
	// fake clock, which moves only when every goroutine is blocked.
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		w := newWheel[int](systemClock{}, time.Millisecond, 64)
		firedAt := make(chan time.Duration, 2)
		stop := startRun(w, func(vs []int) {
			for range vs {
				firedAt <- time.Since(start)
			}
		})
		defer stop()

		w.add(start.Add(1500*time.Microsecond), 1)
		w.add(start.Add(3*time.Minute), 2)
		for _, want := range []time.Duration{2 * time.Millisecond, 3 * time.Minute} {
			if got := <-firedAt; got != want {
				t.Fatalf("fired after %v, want %v", got, want)
			}
		}
	})
}

func TestWheelConcurrentAddCancel(t *testing.T) {
	// Real time, for the race detector: producers add and cancel while the
	// run loop fires. The test waits on events only: every entry not
	// cancelled fires, exactly once.
	w := newWheel[int](systemClock{}, time.Millisecond, 64)
	const producers, perProducer = 4, 500
	var (
		mu        sync.Mutex
		fired     = map[int]int{} // value -> times fired, dedupe entries aside
		nFired    int
		cancelled = map[int]bool{}
		progress  = make(chan struct{}, 1)
	)
	stop := startRun(w, func(vs []int) {
		mu.Lock()
		for _, v := range vs {
			if v >= 0 {
				fired[v]++
				nFired++
			}
		}
		mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
	})
	defer stop()

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				v := p*perProducer + i
				e := w.add(time.Now().Add(time.Duration(i%20)*time.Millisecond), v)
				if i%3 == 0 && w.cancel(e) {
					mu.Lock()
					cancelled[v] = true
					mu.Unlock()
				}
				w.addIfAbsent(time.Now().Add(time.Duration(i%7)*time.Millisecond), -1)
			}
		})
	}
	wg.Wait()
	want := producers*perProducer - len(cancelled)
	for {
		mu.Lock()
		n := nFired
		mu.Unlock()
		if n >= want {
			break
		}
		<-progress
	}
	mu.Lock()
	defer mu.Unlock()
	for v := range producers * perProducer {
		if cancelled[v] && fired[v] != 0 || !cancelled[v] && fired[v] != 1 {
			t.Fatalf("value %d: cancelled %v, fired %d times", v, cancelled[v], fired[v])
		}
	}
}
