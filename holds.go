package ax

import (
	"container/heap"
	"sync"
	"time"
)

// holds releases the attempts claimed ahead of their run times
// (ClaimParams.Ahead) at their start times. A Go timer can wake a
// millisecond late when the process is otherwise idle (on Linux the
// network poller sleeps in whole milliseconds), which would be most of a
// scheduled job's start lag; so one goroutine waits for the earliest
// start with a timer until precisionWindow before it, then sleeps the
// rest in short precise sleeps (preciseSleep), whatever the number of
// jobs held.
//
// A precise sleep is a system call, which a fake clock (Config.Clock, or
// testing/synctest's bubble, whose time moves only while every goroutine
// waits on it) does not see: when the clock stands still across one,
// holds goes back to timers for good.
type holds struct {
	now     func() time.Time
	precise bool // precise sleeps follow the clock; guarded by the run goroutine

	mu      sync.Mutex
	pending holdHeap
	kick    chan struct{} // capacity 1: an earlier start was added
	quit    chan struct{}
	done    chan struct{}
}

// precisionWindow is how long before a start holds stops trusting timers
// and sleeps precisely; preciseStep is the longest precise sleep, so that
// a start added meanwhile is served at most that late.
const (
	precisionWindow = 2 * time.Millisecond
	preciseStep     = 250 * time.Microsecond
)

// hold is one attempt waiting for its start.
type hold struct {
	at      time.Time
	release chan struct{} // closed at the start time
}

func newHolds(now func() time.Time) *holds {
	return &holds{now: now, precise: preciseSleeps, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// add returns a channel closed at host time at (at once if it passed).
func (h *holds) add(at time.Time) <-chan struct{} {
	hd := &hold{at: at, release: make(chan struct{})}
	h.mu.Lock()
	heap.Push(&h.pending, hd)
	first := h.pending[0] == hd
	h.mu.Unlock()
	if first {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
	return hd.release
}

// start runs the releasing goroutine until stop.
func (h *holds) start() { go h.run() }

// stop ends the releasing goroutine. Holds still pending are never
// released: their attempts wait on their contexts too.
func (h *holds) stop() {
	close(h.quit)
	<-h.done
}

func (h *holds) run() {
	defer close(h.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, waiting := h.releaseDue()
		switch {
		case waiting && wait <= precisionWindow && h.precise:
			h.sleepPrecisely(min(wait, preciseStep))
			select {
			case <-h.quit:
				return
			default:
			}
			continue
		case waiting && h.precise:
			timer.Reset(wait - precisionWindow)
		case waiting:
			timer.Reset(wait)
		default:
			timer.Reset(time.Hour)
		}
		select {
		case <-h.quit:
			return
		case <-h.kick:
		case <-timer.C:
		}
	}
}

// sleepPrecisely sleeps for d with a precise sleep, and turns precise
// sleeps off if the clock did not move across a whole one.
func (h *holds) sleepPrecisely(d time.Duration) {
	before := h.now()
	if preciseSleep(d) && h.now().Sub(before) < d/2 {
		h.precise = false
	}
}

// releaseDue releases every hold whose start time came, and returns how
// long until the next one (waiting false: none is pending).
func (h *holds) releaseDue() (wait time.Duration, waiting bool) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.pending) > 0 {
		next := h.pending[0]
		if wait = next.at.Sub(now); wait > 0 {
			return wait, true
		}
		heap.Pop(&h.pending)
		close(next.release)
	}
	return 0, false
}

// holdHeap orders holds by start time (container/heap).
type holdHeap []*hold

func (q holdHeap) Len() int           { return len(q) }
func (q holdHeap) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q holdHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *holdHeap) Push(x any)        { *q = append(*q, x.(*hold)) }
func (q *holdHeap) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return x
}
