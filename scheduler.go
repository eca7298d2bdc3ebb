package ax

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Scheduler schedules jobs into a Store and runs the ones due, on this host,
// with the handlers registered by Handle. Every host of a service runs one;
// they coordinate only through the Store. All methods are safe for
// concurrent use.
//
// Lifecycle: New, Handle (any time before Stop), Start, then Stop. Schedule,
// Get and the control methods work from New on, also before Start (to
// enqueue from a process that does not run jobs) and return
// ErrSchedulerClosed once Stop has begun.
type Scheduler struct {
	cfg   Config
	store store.Store
	log   *zap.Logger
	now   func() time.Time

	mu       sync.Mutex
	handlers map[string]*kindHandler
	phase    phase
	stopped  chan struct{} // closed when Stop has finished

	// storeOffset is the store clock minus the host clock, in nanoseconds,
	// as measured by the latest claim. Wake-ups subtract it.
	storeOffset atomic.Int64

	run *runtime // set by Start
	ev  *events

	// periodic holds the schedules declared by Every (periodic.go).
	periodic periodicSet
}

// phase is the Scheduler's lifecycle position.
type phase int

const (
	phaseNew phase = iota
	phaseRunning
	phaseStopping
	phaseStopped
)

// New validates cfg, fills in its defaults and returns a Scheduler that is
// not yet running. A bad Config returns an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Scheduler, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("ax.New: %w", err)
	}
	return &Scheduler{
		cfg:      c,
		store:    c.Store,
		log:      c.Logger.With(zap.String(fieldNode, c.Node)),
		now:      c.Clock,
		handlers: make(map[string]*kindHandler),
		stopped:  make(chan struct{}),
		ev:       newEvents(c.Observers, c.EventBuffer),
	}, nil
}

// Node returns the name this Scheduler records on the jobs it runs.
func (s *Scheduler) Node() string { return s.cfg.Node }

// Handle registers h for jobs of kind on this host. Jobs of kinds without a
// handler here are left for other hosts. It returns an error wrapping
// ErrInvalidKind, ErrInvalidOption, ErrDuplicateHandler (a second handler
// for one kind) or ErrSchedulerClosed, registering nothing. Handle may be
// called after Start; the kind is claimed from the next claim on.
func (s *Scheduler) Handle(kind string, h JobHandler, opts ...HandlerOption) error {
	if err := checkKind(kind); err != nil {
		return fmt.Errorf("handle: %w", err)
	}
	if h == nil {
		return fmt.Errorf("handle %q: %w: nil handler", kind, ErrInvalidOption)
	}
	settings := handlerSettings{
		timeout:     s.cfg.JobTimeout,
		maxAttempts: s.cfg.MaxAttempts,
		priority:    Normal,
		retry:       s.cfg.RetryPolicy,
		concurrency: s.cfg.Workers,
	}
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("handle %q: %w: nil option", kind, ErrInvalidOption)
		}
		if err := o.applyHandler(&settings); err != nil {
			return fmt.Errorf("handle %q: %w", kind, err)
		}
	}
	settings.concurrency = min(settings.concurrency, s.cfg.Workers)
	wrapped := wrapMiddleware(wrapMiddleware(h, settings.middleware), s.cfg.Middleware)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase >= phaseStopping {
		return fmt.Errorf("handle %q: %w", kind, ErrSchedulerClosed)
	}
	if _, ok := s.handlers[kind]; ok {
		return fmt.Errorf("handle %q: %w", kind, ErrDuplicateHandler)
	}
	s.handlers[kind] = &kindHandler{kind: kind, handler: wrapped, settings: settings}
	if s.run != nil {
		s.run.wake()
	}
	return nil
}

// handler returns the registered handler of kind, or nil.
func (s *Scheduler) handler(kind string) *kindHandler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handlers[kind]
}

// kinds returns the registered handlers sorted by kind.
func (s *Scheduler) kinds() []*kindHandler {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*kindHandler, 0, len(s.handlers))
	for _, h := range s.handlers {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].kind < out[j].kind })
	return out
}

// Start starts claiming and running jobs and returns once the Scheduler
// runs. ctx bounds only the start-up (a first call to the store); the
// Scheduler runs until Stop. Start after Stop returns ErrSchedulerClosed; a
// second Start returns nil and does nothing.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.phase {
	case phaseRunning:
		return nil
	case phaseStopping, phaseStopped:
		return fmt.Errorf("start: %w", ErrSchedulerClosed)
	}
	hostBefore := s.now()
	storeNow, err := s.store.Now(ctx)
	if err != nil {
		return fmt.Errorf("start: reach store: %w", err)
	}
	s.measureOffset(hostBefore, s.now(), storeNow)
	s.ev.start()
	s.run = newRuntime(s)
	s.run.start()
	s.phase = phaseRunning
	s.log.Info("scheduler started", zap.Int("workers", s.cfg.Workers), zap.Int("kinds", len(s.handlers)))
	return nil
}

// Stop stops the Scheduler gracefully, like http.Server.Shutdown: it stops
// claiming, lets running jobs finish until ctx is done, then cancels the
// rest (context.Cause ErrStopping) and hands them back to the store at once,
// as scheduled and without counting the attempt, so another host runs them
// without waiting for their leases to expire. It flushes every outcome and
// returns ctx.Err() when the deadline cut jobs short, nil otherwise.
//
// Stop is safe to call twice (the second call waits for the first) and
// before Start. Handlers that ignore their context are waited for at most
// Config.ReleaseTimeout after the hand-back, then abandoned.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	switch s.phase {
	case phaseNew:
		s.phase = phaseStopped
		close(s.stopped)
		s.mu.Unlock()
		return nil
	case phaseStopping, phaseStopped:
		s.mu.Unlock()
		select {
		case <-s.stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.phase = phaseStopping
	run := s.run
	s.mu.Unlock()

	err := run.stop(ctx)

	s.mu.Lock()
	s.phase = phaseStopped
	close(s.stopped)
	s.mu.Unlock()
	s.log.Info("scheduler stopped", zap.Error(err))
	return err
}

// DroppedEvents returns how many events were dropped because Observers
// fell behind by more than Config.EventBuffer events.
func (s *Scheduler) DroppedEvents() int64 { return s.ev.dropped.Load() }

// emit sends an event to the observers, stamping time and node.
func (s *Scheduler) emit(e Event) {
	if len(s.ev.observers) == 0 {
		return // no clock read on the hot path when nobody listens
	}
	e.At, e.Node = s.now(), s.cfg.Node
	s.ev.emit(e)
}

// closed reports whether Stop has begun.
func (s *Scheduler) closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase >= phaseStopping
}

// measureOffset records the store-minus-host clock offset from a store
// reading taken between two host readings.
func (s *Scheduler) measureOffset(hostBefore, hostAfter, storeNow time.Time) {
	mid := hostBefore.Add(hostAfter.Sub(hostBefore) / 2)
	s.storeOffset.Store(int64(storeNow.Sub(mid)))
}

// hostTime converts a store time to the host clock.
func (s *Scheduler) hostTime(storeTime time.Time) time.Time {
	return storeTime.Add(-time.Duration(s.storeOffset.Load()))
}

// newJobID returns a UUIDv7.
func newJobID() (uuid.UUID, error) { return uuid.NewV7() }
