package ax

import (
	"sync"
	"time"
)

// wakeups is a placeholder until the timing wheel lands: one timer for the
// earliest wake-up.
type wakeups struct {
	mu    sync.Mutex
	now   func() time.Time
	fire  func()
	timer *time.Timer
	next  time.Time
}

func newWakeups(now func() time.Time, fire func()) *wakeups {
	return &wakeups{now: now, fire: fire}
}

func (w *wakeups) add(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil && !w.next.IsZero() && !t.Before(w.next) {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.next = t
	w.timer = time.AfterFunc(t.Sub(w.now()), func() {
		w.mu.Lock()
		w.next = time.Time{}
		w.mu.Unlock()
		w.fire()
	})
}

func (w *wakeups) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}
