package ax

import (
	"context"
	"time"
)

// wakeups turns "claim at time T" requests into claimer wake-ups through
// the timing wheel: one entry per tick however many jobs share it, one
// timer armed for the earliest entry, and no wake-ups for empty slots.
type wakeups struct {
	w      *wheel[struct{}]
	fire   func()
	cancel context.CancelFunc
	done   chan struct{}
}

// hostClock adapts Config.Clock to the wheel's clock. Timers measure
// durations, which a skewed host clock does not change.
type hostClock struct{ now func() time.Time }

// Now returns the (possibly skewed) host time.
func (c hostClock) Now() time.Time { return c.now() }

// NewTimer returns a real timer.
func (c hostClock) NewTimer(d time.Duration) clockTimer { return systemClock{}.NewTimer(d) }

func newWakeups(now func() time.Time, fire func()) *wakeups {
	return &wakeups{
		w:    newWheel[struct{}](hostClock{now}, wakeupTick, defaultWheelSize),
		fire: fire,
		done: make(chan struct{}),
	}
}

// start runs the wheel until stop.
func (w *wakeups) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.w.run(ctx, func([]struct{}) { w.fire() })
	}()
}

// add asks for a wake-up at host time t (at most one tick late).
func (w *wakeups) add(t time.Time) { w.w.addIfAbsent(t, struct{}{}) }

// stop stops the wheel's goroutine and waits for it.
func (w *wakeups) stop() {
	w.cancel()
	<-w.done
}

// wakeupTick is the wheel's resolution for claim wake-ups: a wake-up fires
// at most this late. Finer than the wheel's 1 ms default because start lag
// is AX's headline figure; Go timers resolve well below it on Linux.
const wakeupTick = 250 * time.Microsecond
