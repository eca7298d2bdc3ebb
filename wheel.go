package ax

import (
	"cmp"
	"container/heap"
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// The wheel is the host's wake-up index (DESIGN.md, "Timing: the wheel is a
// wake-up index over the store"): the scheduler adds "wake me at T" entries
// for due times it learned from the store, and runs one batched claim when
// entries expire. The store stays the source of truth; the wheel only
// decides when to ask it.
//
// It is a hierarchical timing wheel in the style of Kafka's TimingWheel
// (Varghese and Lauck):
//
//   - Time is counted in ticks since the wheel's origin (the clock's Now at
//     newWheel). An entry's tick is its time rounded UP to a tick boundary, so
//     an entry never fires before its time and at most one tick after it.
//   - Level 0 has size slots of one tick each. Level i has size slots of
//     size^i ticks each. Levels above 0 are created on demand, the first
//     time an entry lies beyond the span of every existing level.
//   - An entry goes into the finest level whose window, starting at the
//     level's current time (the wheel's time rounded down to the level's
//     slot width), covers it. Its slot's bucket then expires at the start of
//     the slot.
//   - Buckets, not ticks, go into a min-heap by expiration. A bucket is
//     pushed when it receives its first entry and removed when it is
//     flushed or its last entry is cancelled, so the heap holds exactly the
//     non-empty buckets, at most levels × size of them. One timer is armed
//     for the heap's minimum: empty slots never cost a wake-up.
//   - Advancing pops the expired buckets in expiration order, moving the
//     wheel's time to each bucket's expiration before flushing it; each
//     flushed entry either is due (its tick is not after the wheel's time)
//     and is collected, or is re-added, which puts it in a finer level
//     (cascading). Level-0 buckets hold a single tick, so their entries are
//     always due when they expire.
//   - Entries whose tick is already reached when added go to a separate
//     past-due list, which the next advance drains: they fire immediately.
//
// Entries due in one advance are delivered ordered by (tick, insertion
// order). Buckets already come out in tick order; the order of entries
// sharing a tick can be disturbed by cascading (an entry added early may sit
// in a coarser level than one added later for the same tick), so advance
// sorts the batch when, and only when, it is out of order.

// Defaults for newWheel.
const (
	// defaultWheelTick is the granularity of level 0, and so the most an
	// entry can fire late: well under the round trip of one claim.
	defaultWheelTick = time.Millisecond

	// defaultWheelSize is the number of slots per level. With the default
	// tick, level 0 spans the next second (as DESIGN.md asks), level 1
	// about 17 minutes, level 2 about 12 days and level 3 about 35 years.
	// A level costs 32 KiB of buckets.
	defaultWheelSize = 1024
)

// clock is the wheel's view of time. It is passed in, never read from the
// time package directly, so tests drive time deterministically (STYLE.md,
// "The clock is passed in"); systemClock is the real one.
type clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends on its channel once d has passed.
	NewTimer(d time.Duration) clockTimer
}

// clockTimer is the part of *time.Timer the wheel uses. Implementations must
// follow the timer semantics of Go 1.23 and later: once Reset or Stop
// returns, no value sent before the call is received from C.
type clockTimer interface {
	// C returns the channel on which the timer delivers its time.
	C() <-chan time.Time
	// Reset re-arms the timer to fire after d, as time.Timer.Reset.
	Reset(d time.Duration) bool
	// Stop prevents the timer from firing, as time.Timer.Stop.
	Stop() bool
}

// systemClock is the clock of the host: time.Now and time.Timer. Its Now
// carries a monotonic reading, so the wheel's own arithmetic is immune to
// wall-clock steps.
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// NewTimer returns a wrapped time.NewTimer(d).
func (systemClock) NewTimer(d time.Duration) clockTimer {
	return systemTimer{t: time.NewTimer(d)}
}

// systemTimer adapts *time.Timer to clockTimer; a method named C cannot sit
// beside the embedded field C, hence the wrapper.
type systemTimer struct{ t *time.Timer }

// C returns the timer's channel.
func (s systemTimer) C() <-chan time.Time { return s.t.C }

// Reset calls time.Timer.Reset.
func (s systemTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }

// Stop calls time.Timer.Stop.
func (s systemTimer) Stop() bool { return s.t.Stop() }

// wheelEntry is one pending wake-up and the handle add returns; cancel takes
// it back. It is an intrusive doubly-linked list node, so that linking into
// a bucket and cancelling are O(1) without a lookup. Its fields belong to
// the wheel and are guarded by the wheel's mutex.
type wheelEntry[T any] struct {
	value T
	// tick is the entry's time in ticks since the wheel's origin, rounded
	// up: the entry is due once the wheel's time reaches it.
	tick int64
	// seq is the insertion order, which orders entries sharing a tick.
	seq uint64
	// bucket is the list holding the entry; nil once fired or cancelled,
	// which is how cancel knows it is too late.
	bucket     *wheelBucket[T]
	prev, next *wheelEntry[T]
	// keyed marks an entry added by addIfAbsent, listed in wheel.byTick.
	keyed bool
}

// wheelBucket is one slot's list of entries, and the unit the delay queue
// orders: all its entries share one expiration, the start of the slot.
type wheelBucket[T any] struct {
	head, tail *wheelEntry[T]
	// exp is the tick at which the bucket expires; meaningful while queued.
	exp int64
	// index is the bucket's position in the wheel's queue, -1 when not
	// queued. Only non-empty buckets are queued.
	index int
}

// push appends e to b, keeping insertion order within a bucket.
func (b *wheelBucket[T]) push(e *wheelEntry[T]) {
	e.bucket, e.prev, e.next = b, b.tail, nil
	if b.tail != nil {
		b.tail.next = e
	} else {
		b.head = e
	}
	b.tail = e
}

// remove unlinks e from b and marks it as no longer pending.
func (b *wheelBucket[T]) remove(e *wheelEntry[T]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		b.tail = e.prev
	}
	e.bucket, e.prev, e.next = nil, nil, nil
}

// wheelLevel is one ring of buckets.
type wheelLevel[T any] struct {
	// unit is the width of one slot in ticks: size^level.
	unit int64
	// span is the width of the level's window, unit × size, or MaxInt64 when
	// that overflows: such a top level holds every tick that exists.
	span    int64
	buckets []wheelBucket[T]
}

// bucketQueue is the delay queue: a container/heap min-heap of the
// non-empty buckets by expiration, each bucket knowing its index so that
// cancelling a bucket's last entry can remove it.
type bucketQueue[T any] []*wheelBucket[T]

// Len implements heap.Interface.
func (q bucketQueue[T]) Len() int { return len(q) }

// Less implements heap.Interface: earliest expiration first.
func (q bucketQueue[T]) Less(i, j int) bool { return q[i].exp < q[j].exp }

// Swap implements heap.Interface, keeping the buckets' indexes current.
func (q bucketQueue[T]) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

// Push implements heap.Interface.
func (q *bucketQueue[T]) Push(x any) {
	b := x.(*wheelBucket[T])
	b.index = len(*q)
	*q = append(*q, b)
}

// Pop implements heap.Interface.
func (q *bucketQueue[T]) Pop() any {
	old := *q
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	b.index = -1
	return b
}

// wheel is a hierarchical timing wheel of values of type T; see the comment
// at the top of this file. All methods are safe for concurrent use. The
// zero value is not usable: call newWheel.
type wheel[T any] struct {
	clk    clock
	tick   time.Duration
	size   int64
	origin time.Time // tick 0: the clock's Now at newWheel

	// wake tells a sleeping run loop that the earliest expiration moved, so
	// that it re-arms its timer. Buffered: a kick is never lost or blocking.
	wake chan struct{}

	mu sync.Mutex
	// cur is the wheel's time in ticks: the latest tick it advanced to.
	// It never decreases, and every queued bucket expires after it.
	cur    int64
	seq    uint64
	n      int // pending entries
	levels []*wheelLevel[T]
	queue  bucketQueue[T]
	// due holds entries added when their tick had already been reached;
	// it is never queued, and the next advance drains it.
	due wheelBucket[T]
	// never holds entries at neverTick: they cannot come due, so they are
	// kept out of the queue (no timer for them), but remain cancellable.
	never wheelBucket[T]
	// byTick indexes the pending entries added by addIfAbsent, so memory
	// stays proportional to pending entries.
	byTick map[int64]*wheelEntry[T]
	// expired is advance's scratch slice, kept to avoid an allocation per
	// advance.
	expired []*wheelEntry[T]
	// running is set while run runs: there may be one loop only.
	running bool
	// waitFor is the expiration the run loop's timer is armed for:
	// MaxInt64 when it sleeps with no timer, MinInt64 when no loop runs or
	// the loop will look at the wheel again anyway (no kick needed).
	waitFor int64
}

// newWheel returns an empty wheel whose time starts at clk.Now(). A tick of
// zero or less means defaultWheelTick; a size below 2 means defaultWheelSize.
// Level 0 spans tick × size; each level above spans size times more.
func newWheel[T any](clk clock, tick time.Duration, size int) *wheel[T] {
	if tick <= 0 {
		tick = defaultWheelTick
	}
	if size < 2 {
		size = defaultWheelSize
	}
	return &wheel[T]{
		clk:     clk,
		tick:    tick,
		size:    int64(size),
		origin:  clk.Now(),
		wake:    make(chan struct{}, 1),
		due:     wheelBucket[T]{index: -1},
		never:   wheelBucket[T]{index: -1},
		waitFor: math.MinInt64,
	}
}

// add schedules v to fire at time at and returns the entry's handle for
// cancel. The entry fires at the first advance to a time at or after at
// rounded up to the tick, so at most one tick late and never early; a time
// already reached fires at the next advance, that is immediately under run.
// Times should be in the host clock's terms: a caller that learned them from
// the store converts them (offset correction) before adding. A time about
// 292 years or more after the wheel's origin (the reach of a time.Duration)
// never fires, but can be cancelled.
func (w *wheel[T]) add(at time.Time, v T) *wheelEntry[T] {
	e := &wheelEntry[T]{value: v}
	w.mu.Lock()
	w.insertLocked(e, w.tickCeil(at))
	w.mu.Unlock()
	return e
}

// addIfAbsent is add, deduplicated per tick: if an entry added by
// addIfAbsent for the same tick is still pending, it returns that entry and
// false, adding nothing. The scheduler hears the same due time many times
// (claim rounds, notifications); this keeps one wake-up per tick. The index
// holds pending entries only, so memory stays bounded by them.
func (w *wheel[T]) addIfAbsent(at time.Time, v T) (*wheelEntry[T], bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tick := w.tickCeil(at)
	if e, ok := w.byTick[tick]; ok {
		return e, false
	}
	if w.byTick == nil {
		w.byTick = make(map[int64]*wheelEntry[T])
	}
	e := &wheelEntry[T]{value: v, keyed: true}
	w.byTick[tick] = e
	w.insertLocked(e, tick)
	return e, true
}

// insertLocked makes e pending at tick and kicks a sleeping run loop if e
// is now the earliest.
func (w *wheel[T]) insertLocked(e *wheelEntry[T], tick int64) {
	w.seq++
	e.tick, e.seq = tick, w.seq
	w.n++
	exp := w.cur
	switch {
	case tick == neverTick: // first: cur itself can saturate to neverTick
		w.never.push(e)
		return
	case tick <= w.cur:
		w.due.push(e)
	default:
		exp = w.place(e)
	}
	if exp < w.waitFor {
		w.kickLocked()
	}
}

// place links e, whose tick is after w.cur, into the finest level whose
// window covers it, queues its bucket if the bucket was empty, and returns
// the bucket's expiration. Every queued bucket expires after w.cur, so a
// slot is never shared by two expirations (see the invariant on cur).
func (w *wheel[T]) place(e *wheelEntry[T]) int64 {
	for i := 0; ; i++ {
		if i == len(w.levels) {
			w.addLevel()
		}
		l := w.levels[i]
		start := w.cur - w.cur%l.unit // cur >= 0
		if l.span != math.MaxInt64 && e.tick-start >= l.span {
			continue
		}
		vid := e.tick / l.unit
		b := &l.buckets[vid%w.size]
		b.push(e)
		if b.index < 0 {
			b.exp = vid * l.unit
			heap.Push(&w.queue, b)
		}
		return b.exp
	}
}

// addLevel creates the next coarser level.
func (w *wheel[T]) addLevel() {
	unit := int64(1)
	if n := len(w.levels); n > 0 {
		unit = w.levels[n-1].span // never MaxInt64: that level takes everything
	}
	span := int64(math.MaxInt64)
	if unit <= math.MaxInt64/w.size {
		span = unit * w.size
	}
	l := &wheelLevel[T]{unit: unit, span: span, buckets: make([]wheelBucket[T], w.size)}
	for i := range l.buckets {
		l.buckets[i].index = -1
	}
	w.levels = append(w.levels, l)
}

// cancel removes e so that it never fires, and reports whether it did: false
// when e already fired, was already cancelled, or is nil. Safe to call
// more than once and concurrently with a run loop, which it lets re-arm for
// the next bucket when e was the last entry of the one it waits for.
func (w *wheel[T]) cancel(e *wheelEntry[T]) bool {
	if e == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	b := e.bucket
	if b == nil {
		return false
	}
	b.remove(e)
	w.n--
	w.unkeyLocked(e)
	if b.head == nil && b.index >= 0 {
		heap.Remove(&w.queue, b.index)
		if b.exp == w.waitFor {
			w.kickLocked()
		}
	}
	return true
}

// unkeyLocked drops e from the addIfAbsent index once it stops pending.
func (w *wheel[T]) unkeyLocked(e *wheelEntry[T]) {
	if e.keyed {
		delete(w.byTick, e.tick)
		e.keyed = false
	}
}

// kickLocked wakes the run loop, if one is sleeping, to re-arm its timer.
func (w *wheel[T]) kickLocked() {
	w.waitFor = math.MinInt64 // it will look again: no further kicks
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// advance moves the wheel's time to now, removes every entry due at now
// (its time rounded up to the tick is not after now) and appends their
// values to dst, ordered by tick then insertion order. It returns the
// extended slice. Entries not due stay; a now before the wheel's time
// changes nothing but may still deliver past-due entries.
func (w *wheel[T]) advance(now time.Time, dst []T) []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.advanceLocked(w.tickFloor(now), dst)
}

// advanceLocked is advance with now in ticks.
func (w *wheel[T]) advanceLocked(now int64, dst []T) []T {
	exp := w.expired[:0]
	for e := w.due.head; e != nil; {
		next := e.next
		if e.tick <= now {
			w.due.remove(e)
			exp = append(exp, e)
		}
		e = next
	}
	for len(w.queue) > 0 && w.queue[0].exp <= now {
		b := heap.Pop(&w.queue).(*wheelBucket[T])
		w.cur = max(w.cur, b.exp)
		e := b.head
		b.head, b.tail = nil, nil
		for e != nil {
			next := e.next
			e.bucket, e.prev, e.next = nil, nil, nil
			if e.tick <= w.cur {
				exp = append(exp, e)
			} else {
				w.place(e) // cascade into a finer level
			}
			e = next
		}
	}
	w.cur = max(w.cur, now)
	if !slices.IsSortedFunc(exp, compareEntries[T]) {
		slices.SortFunc(exp, compareEntries[T])
	}
	for i, e := range exp {
		dst = append(dst, e.value)
		w.unkeyLocked(e)
		exp[i] = nil
	}
	w.n -= len(exp)
	if cap(exp) > 4096 {
		exp = nil // do not hold a burst's worth of memory forever
	}
	w.expired = exp[:0]
	return dst
}

// compareEntries orders entries as they fire: by tick, then insertion.
func compareEntries[T any](a, b *wheelEntry[T]) int {
	if c := cmp.Compare(a.tick, b.tick); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// next returns the expiration of the earliest non-empty bucket: the time at
// which advance next has something to do (fire or cascade). It returns false
// when the wheel is empty. With a past-due entry pending, it returns that
// entry's time, which has been reached.
func (w *wheel[T]) next() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.nextLocked()
	if !ok {
		return time.Time{}, false
	}
	return w.timeOf(t), true
}

// nextLocked is next in ticks.
func (w *wheel[T]) nextLocked() (int64, bool) {
	if w.due.head != nil {
		// Normally due entries are all reached (tick <= cur) and advance
		// drains them; only a now passed from before the wheel's time leaves
		// some, and then the scan finds the earliest.
		t := w.due.head.tick
		for e := w.due.head.next; e != nil; e = e.next {
			t = min(t, e.tick)
		}
		return t, true
	}
	if len(w.queue) > 0 {
		return w.queue[0].exp, true
	}
	return 0, false
}

// len returns the number of pending entries.
func (w *wheel[T]) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// run drives the wheel by its clock until ctx is done: it keeps one timer
// armed for the earliest non-empty bucket, and whenever entries become due
// it calls fire with their values, in advance's order. fire runs on run's
// goroutine without the wheel's lock, so it may add and cancel; the slice
// is valid only during the call. Adds and cancels from other goroutines
// re-arm the timer when they change the earliest bucket, and only then.
//
// run returns once ctx is done (or after the fire call in progress returns),
// leaving entries pending; the caller runs it in a goroutine it waits for.
// Only one run may be active at a time; a second one panics.
func (w *wheel[T]) run(ctx context.Context, fire func([]T)) {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		panic("ax: wheel.run called while already running")
	}
	w.running = true
	w.mu.Unlock()

	var (
		timer    clockTimer
		timerC   <-chan time.Time // nil, blocking forever, until a timer exists
		armed    bool             // timer will fire for armedFor
		armedFor int64
		batch    []T
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		w.mu.Lock()
		w.running = false
		w.waitFor = math.MinInt64
		w.mu.Unlock()
	}()
	for ctx.Err() == nil {
		w.mu.Lock()
		now := w.clk.Now()
		batch = w.advanceLocked(w.tickFloor(now), batch[:0])
		next, ok := w.nextLocked()
		switch {
		case len(batch) > 0:
			w.waitFor = math.MinInt64 // looping straight back after fire
		case ok:
			w.waitFor = next
		default:
			w.waitFor = math.MaxInt64
		}
		w.mu.Unlock()

		if len(batch) > 0 {
			fire(batch)
			clear(batch) // drop references to fired values
			continue
		}
		switch {
		case ok && !(armed && armedFor == next):
			d := w.timeOf(next).Sub(now)
			if timer == nil {
				timer = w.clk.NewTimer(d)
				timerC = timer.C()
			} else {
				timer.Reset(d)
			}
			armed, armedFor = true, next
		case !ok && armed:
			timer.Stop()
			armed = false
		}
		select {
		case <-ctx.Done():
		case <-timerC:
			armed = false
		case <-w.wake:
		}
	}
}

// neverTick is the tick of entries too far ahead to ever come due: within a
// tick of the largest time.Duration (about 292 years) after the origin,
// where time.Time.Sub saturates and can no longer tell times apart.
const neverTick = math.MaxInt64

// tickCeil converts t to ticks since the origin, rounding up so that an
// entry is never due before t; neverTick when out of reach.
func (w *wheel[T]) tickCeil(t time.Time) int64 {
	d := t.Sub(w.origin) // saturates at the Duration bounds
	if d > math.MaxInt64-w.tick {
		return neverTick
	}
	q := int64(d / w.tick)
	if d > 0 && d%w.tick != 0 {
		q++
	}
	return q
}

// tickFloor converts t to ticks since the origin, rounding down: the ticks
// fully reached at t.
func (w *wheel[T]) tickFloor(t time.Time) int64 {
	d := t.Sub(w.origin)
	q := int64(d / w.tick)
	if d < 0 && d%w.tick != 0 {
		q--
	}
	return q
}

// timeOf converts a tick other than neverTick back to a time.
func (w *wheel[T]) timeOf(tick int64) time.Time {
	return w.origin.Add(time.Duration(tick) * w.tick)
}
