package ax

import (
	"container/heap"
	"math"
	"slices"
	"testing"
	"time"
)

// refWheel is the fuzz test's reference for the wheel: a min-heap of every
// pending entry ordered by (tick, insertion), where tick is the entry's time
// rounded up to the tick since the origin. advance(now) fires, in that
// order, every pending entry whose tick is not after now rounded down. That
// is the wheel's contract (with entries beyond the reach of a time.Duration
// from the origin never firing); how it gets there (levels, buckets, cascades)
// does not matter here. Cancelled entries are deleted lazily.
type refWheel struct {
	origin time.Time
	tick   time.Duration
	heap   refHeap
	live   map[int]*refEntry // pending entries by id
	byTick map[int64]int     // pending addIfAbsent entries: tick -> id
	seq    int
}

// refEntry is one reference entry.
type refEntry struct {
	id, seq int
	tick    int64
	keyed   bool
	dead    bool
}

// refHeap orders refEntries by (tick, seq) for container/heap.
type refHeap []*refEntry

// Len implements heap.Interface.
func (h refHeap) Len() int { return len(h) }

// Less implements heap.Interface.
func (h refHeap) Less(i, j int) bool {
	if h[i].tick != h[j].tick {
		return h[i].tick < h[j].tick
	}
	return h[i].seq < h[j].seq
}

// Swap implements heap.Interface.
func (h refHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

// Push implements heap.Interface.
func (h *refHeap) Push(x any) { *h = append(*h, x.(*refEntry)) }

// Pop implements heap.Interface.
func (h *refHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// ceil is at in ticks since the origin, rounded up.
func (r *refWheel) ceil(at time.Time) int64 {
	d := at.Sub(r.origin)
	q := d / r.tick
	if q*r.tick < d {
		q++
	}
	return int64(q)
}

// floor is now in ticks since the origin, rounded down.
func (r *refWheel) floor(now time.Time) int64 {
	d := now.Sub(r.origin)
	q := d / r.tick
	if q*r.tick > d {
		q--
	}
	return int64(q)
}

// add makes id pending at at.
func (r *refWheel) add(at time.Time, id int, keyed bool) {
	r.seq++
	e := &refEntry{id: id, seq: r.seq, tick: r.ceil(at), keyed: keyed}
	if at.Sub(r.origin) <= math.MaxInt64-r.tick { // else out of reach: never fires
		heap.Push(&r.heap, e)
	}
	r.live[id] = e
	if keyed {
		r.byTick[e.tick] = id
	}
}

// addIfAbsent returns the id of the pending keyed entry at at's tick, or adds
// id and returns it.
func (r *refWheel) addIfAbsent(at time.Time, id int) int {
	if other, ok := r.byTick[r.ceil(at)]; ok {
		return other
	}
	r.add(at, id, true)
	return id
}

// remove ends e's pendency.
func (r *refWheel) remove(e *refEntry) {
	e.dead = true
	delete(r.live, e.id)
	if e.keyed {
		delete(r.byTick, e.tick)
	}
}

// cancel reports whether id was pending, ending it.
func (r *refWheel) cancel(id int) bool {
	e, ok := r.live[id]
	if ok {
		r.remove(e)
	}
	return ok
}

// advance fires the entries due at now.
func (r *refWheel) advance(now time.Time) []int {
	var fired []int
	nowTick := r.floor(now)
	for len(r.heap) > 0 && (r.heap[0].dead || r.heap[0].tick <= nowTick) {
		e := heap.Pop(&r.heap).(*refEntry)
		if !e.dead {
			r.remove(e)
			fired = append(fired, e.id)
		}
	}
	return fired
}

// earliest returns the smallest pending tick.
func (r *refWheel) earliest() (int64, bool) {
	for len(r.heap) > 0 && r.heap[0].dead {
		heap.Pop(&r.heap)
	}
	if len(r.heap) == 0 {
		return 0, false
	}
	return r.heap[0].tick, true
}

// fuzzTicks and fuzzScales are what the fuzz bytes choose from: tick sizes
// (1ns reaches the top, saturating, level) and units for time offsets.
var (
	fuzzTicks  = []time.Duration{time.Millisecond, time.Nanosecond, 3 * time.Millisecond, time.Microsecond}
	fuzzScales = []time.Duration{time.Microsecond, time.Millisecond, time.Second, time.Hour}
)

// Fuzz operations, chosen by the low 3 bits of an op byte.
const (
	fuzzAdd         = iota // add at now + signed arg × scale (past allowed)
	fuzzAdd2               // a second add code, so adds dominate
	fuzzAddIfAbsent        // addIfAbsent, same offsets
	fuzzAddFar             // add near the end of representable time
	fuzzCancel             // cancel the arg-th handle so far
	fuzzAdvance            // advance by unsigned arg × scale
	fuzzAdvanceNext        // advance to next(), as run does
	fuzzAdvanceBack        // advance with an old now (a misbehaving caller)
)

// FuzzWheel decodes the input into a sequence of operations (byte 0: tick;
// byte 1: slots per level; then 3 bytes per operation: op, and a 16-bit
// argument whose scale is op bits 3-4) and drives both the wheel and
// refWheel with them. After every step they must agree on what fired and in
// which order (tick, then insertion), on cancel's result and on the number
// pending; nothing fires before its time; next() exists exactly when
// something is pending, is never after the earliest pending entry, and an
// advance to it always makes progress.
func FuzzWheel(f *testing.F) {
	seed := func(tick, size byte, ops ...[3]byte) []byte {
		b := []byte{tick, size}
		for _, op := range ops {
			b = append(b, op[:]...)
		}
		return b
	}
	const ms, s, h = 1 << 3, 2 << 3, 3 << 3 // scale bits
	f.Add(seed(0, 62, [3]byte{fuzzAdd | ms, 0, 5}, [3]byte{fuzzAdvance | ms, 0, 5}))
	f.Add(seed(0, 2,
		[3]byte{fuzzAdd | ms, 0, 40}, [3]byte{fuzzAdvance | ms, 0, 30},
		[3]byte{fuzzAdd | ms, 0, 10}, [3]byte{fuzzAdvanceNext, 0, 0},
		[3]byte{fuzzAdvanceNext, 0, 0}, [3]byte{fuzzAdvanceNext, 0, 0}))
	f.Add(seed(0, 6,
		[3]byte{fuzzAdd | h, 0, 3}, [3]byte{fuzzAdd | s, 1, 0}, [3]byte{fuzzAdd | ms, 0xff, 0},
		[3]byte{fuzzCancel, 0, 1}, [3]byte{fuzzAddIfAbsent | s, 0, 7}, [3]byte{fuzzAddIfAbsent | s, 0, 7},
		[3]byte{fuzzAdvance | h, 0, 4}, [3]byte{fuzzCancel, 0, 0}))
	f.Add(seed(1, 1,
		[3]byte{fuzzAddFar, 0, 0}, [3]byte{fuzzAdd | h, 0x7f, 0xff}, [3]byte{fuzzAdvanceNext, 0, 0},
		[3]byte{fuzzAdd, 0, 1}, [3]byte{fuzzAdvanceBack | s, 0, 1}, [3]byte{fuzzAdvance, 0, 2}))
	f.Add(seed(2, 14,
		[3]byte{fuzzAdvance | s, 0, 9}, [3]byte{fuzzAdd | s, 0xff, 0xf0}, [3]byte{fuzzAdd | ms, 0, 3},
		[3]byte{fuzzAdvanceBack | s, 0, 20}, [3]byte{fuzzAdvanceNext, 0, 0}, [3]byte{fuzzAdvance | ms, 0, 3}))

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		tick := fuzzTicks[int(data[0])%len(fuzzTicks)]
		size := 2 + int(data[1])%63
		data = data[2:]

		w := newWheel[int](newFakeClock(), tick, size)
		ref := &refWheel{origin: t0, tick: tick, live: map[int]*refEntry{}, byTick: map[int64]int{}}
		now := t0
		var (
			handles []*wheelEntry[int] // by id
			ats     []time.Time        // by id
		)
		add := func(at time.Time, keyed bool) {
			id := len(handles)
			if keyed {
				e, added := w.addIfAbsent(at, id)
				if want := ref.addIfAbsent(at, id); added != (want == id) || e.value != want {
					t.Fatalf("addIfAbsent(%v) = (%d, %v), reference says %d", at.Sub(t0), e.value, added, want)
				}
				if !added {
					return
				}
				handles = append(handles, e)
			} else {
				ref.add(at, id, false)
				handles = append(handles, w.add(at, id))
			}
			ats = append(ats, at)
		}
		advance := func(to time.Time) {
			got := w.advance(to, nil)
			if want := ref.advance(to); !slices.Equal(got, want) {
				t.Fatalf("advance to %v fired %v, reference fired %v", to.Sub(t0), got, want)
			}
			for _, id := range got {
				if ats[id].After(to) {
					t.Fatalf("entry %d for %v fired at %v, before its time", id, ats[id].Sub(t0), to.Sub(t0))
				}
			}
		}

		for ; len(data) >= 3; data = data[3:] {
			op, arg := data[0], int16(uint16(data[1])<<8|uint16(data[2]))
			scale := fuzzScales[op>>3&3]
			switch op & 7 {
			case fuzzAdd, fuzzAdd2:
				add(now.Add(time.Duration(arg)*scale), false)
			case fuzzAddIfAbsent:
				add(now.Add(time.Duration(arg)*scale), true)
			case fuzzAddFar:
				add(t0.Add(math.MaxInt64-time.Duration(uint16(arg))), false)
			case fuzzCancel:
				if len(handles) == 0 {
					continue
				}
				id := int(uint16(arg)) % len(handles)
				if got, want := w.cancel(handles[id]), ref.cancel(id); got != want {
					t.Fatalf("cancel(%d) = %v, reference says %v", id, got, want)
				}
			case fuzzAdvance:
				now = now.Add(time.Duration(uint16(arg)) * scale)
				advance(now)
			case fuzzAdvanceNext:
				next, ok := w.next()
				if !ok {
					continue
				}
				now = later(now, next)
				advance(next)
				if after, ok := w.next(); ok && !after.After(next) {
					t.Fatalf("advance to next() %v left next() at %v: no progress", next.Sub(t0), after.Sub(t0))
				}
			case fuzzAdvanceBack:
				advance(now.Add(-time.Duration(uint16(arg)) * scale))
			}

			if got, want := w.len(), len(ref.live); got != want {
				t.Fatalf("len = %d, reference has %d pending", got, want)
			}
			next, ok := w.next()
			earliest, pending := ref.earliest()
			if ok != pending {
				t.Fatalf("next() ok = %v with %d pending", ok, len(ref.live))
			}
			if ok && w.tickFloor(next) > earliest {
				t.Fatalf("next() = %v, after the earliest pending tick %d", next.Sub(t0), earliest)
			}
		}
	})
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
