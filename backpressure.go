package ax

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/axsched/ax/store"
)

// ErrBackpressure is matched (errors.Is) by the error Schedule returns
// when a kind has MaxPending jobs pending, or all kinds Config.MaxPending:
// nothing was stored. The error is a *BackpressureError, which tells the
// kind, the depth and the limit. Retry later, shed the work, or schedule
// with WaitForCapacity.
var ErrBackpressure = errors.New("ax: backpressure: too many pending jobs")

// BackpressureError is the error of a Schedule refused because too many
// jobs are pending. It matches ErrBackpressure.
type BackpressureError struct {
	// Kind is the kind whose MaxPending was reached; empty when it is
	// Config.MaxPending, the bound on all kinds.
	Kind string
	// Depth is the number of pending jobs the store counted; it stops
	// counting at Limit, so Depth is Limit when the queue is full.
	Depth int
	// Limit is the bound reached.
	Limit int
}

// Error implements error.
func (e *BackpressureError) Error() string {
	what := "all kinds"
	if e.Kind != "" {
		what = fmt.Sprintf("kind %q", e.Kind)
	}
	return fmt.Sprintf("%s: %d pending job(s) of %s, limit %d", ErrBackpressure, e.Depth, what, e.Limit)
}

// Is reports whether target is ErrBackpressure.
func (e *BackpressureError) Is(target error) bool { return target == ErrBackpressure }

// WaitForCapacity makes Schedule wait, when the kind (or all kinds) has
// too many pending jobs, until there is room or ctx ends, instead of
// returning ErrBackpressure at once. On ctx's end the error matches both
// ErrBackpressure and ctx's error. A call whose jobs could never fit (more
// rows of a kind than its MaxPending) returns ErrBackpressure at once.
// While waiting, Schedule tries again each time this host starts jobs,
// and at least every 500ms (sooner at first). In ScheduleMany, the call
// waits when any request carries the option, until the first of their
// contexts ends. A nil ctx is an error wrapping ErrInvalidOption.
func WaitForCapacity(ctx context.Context) ScheduleOption { return waitOption{ctx} }

type waitOption struct{ ctx context.Context }

func (o waitOption) applySchedule(*scheduleSettings) error {
	if o.ctx == nil {
		return fmt.Errorf("%w: WaitForCapacity(nil context)", ErrInvalidOption)
	}
	return nil
}

// waitContext returns the context the requests' WaitForCapacity options
// give (the first of theirs to end ends it) and its cancel, or nil when
// none has the option.
func waitContext(reqs []Request) (context.Context, context.CancelFunc) {
	var ctxs []context.Context
	for _, r := range reqs {
		for _, o := range r.Options {
			if w, ok := o.(waitOption); ok && w.ctx != nil {
				ctxs = append(ctxs, w.ctx)
			}
		}
	}
	if len(ctxs) == 0 {
		return nil, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctxs[0])
	var stops []func() bool
	for _, c := range ctxs[1:] {
		stops = append(stops, context.AfterFunc(c, func() { cancel(context.Cause(c)) }))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
	}
}

// Backoff of WaitForCapacity between tries of an insert.
const (
	capacityFirstWait = 10 * time.Millisecond
	capacityMaxWait   = 500 * time.Millisecond
)

// insertWaiting inserts params and, while the store refuses them for
// backpressure and wait is not nil, waits for capacity and tries again.
// It returns a *BackpressureError (wrapped with wait's error when wait
// ended) when the insert was refused.
func (s *Scheduler) insertWaiting(ctx, wait context.Context, params []store.InsertParams,
	insert func([]store.InsertParams) ([]store.InsertResult, error)) ([]store.InsertResult, error) {
	delay := capacityFirstWait
	for first := true; ; first = false {
		res, err := insert(params)
		var pl *store.PendingLimitError
		if !errors.As(err, &pl) {
			return res, err
		}
		bp := &BackpressureError{Kind: pl.Kind, Depth: pl.Pending, Limit: pl.Limit}
		if first {
			s.emit(Event{Kind: EventBackpressure, JobKind: pl.Kind, Err: bp})
		}
		if wait == nil || !fits(params, pl) {
			return nil, bp
		}
		if err := s.capacity.sleep(ctx, wait, delay/2+rand.N(delay/2+1)); err != nil {
			return nil, fmt.Errorf("%w: %w", bp, err)
		}
		delay = min(2*delay, capacityMaxWait)
	}
}

// fits reports whether params could ever pass the bound pl reports.
func fits(params []store.InsertParams, pl *store.PendingLimitError) bool {
	n := 0
	for i := range params {
		if pl.Kind == "" || params[i].Kind == pl.Kind {
			n++
		}
	}
	return n <= pl.Limit
}

// capacitySignal tells Schedule calls waiting for capacity that this host
// started jobs: claims broadcast, cheaply when nobody waits.
type capacitySignal struct {
	mu      sync.Mutex
	waiters int
	ch      chan struct{}
}

// sleep waits for the next broadcast or d, and returns the cause of
// wait's end or ctx's error when either ends first.
func (c *capacitySignal) sleep(ctx, wait context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waiters++
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	signal := c.ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiters--
		c.mu.Unlock()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-signal:
	case <-t.C:
	case <-wait.Done():
		return context.Cause(wait)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// broadcast wakes every waiter.
func (c *capacitySignal) broadcast() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiters > 0 && c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}
