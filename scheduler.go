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

	startMu  sync.Mutex // serializes Start, which calls the store without holding mu
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

	// admin is the Scheduler's Admin (admin.go).
	admin *Admin
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
	s := &Scheduler{
		cfg:      c,
		store:    c.Store,
		log:      c.Logger.With(zap.String(fieldNode, c.Node)),
		now:      c.Clock,
		handlers: make(map[string]*kindHandler),
		stopped:  make(chan struct{}),
		ev:       newEvents(c.Observers, c.EventBuffer),
	}
	s.admin = newSchedulerAdmin(s)
	return s, nil
}

// Store returns the store this Scheduler keeps its jobs in.
func (s *Scheduler) Store() store.Store { return s.store }

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
// Scheduler runs until Stop. Start after Stop (or while Stop runs) returns
// ErrSchedulerClosed; a second Start returns nil and does nothing. Other
// methods are not held up while Start waits for the store.
func (s *Scheduler) Start(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	s.mu.Lock()
	ph := s.phase
	s.mu.Unlock()
	switch ph {
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
	hostAfter := s.now()
	// Read before the first claim, so that a host starting while a kind
	// is paused never claims it.
	paused, err := pausedKinds(ctx, s.store)
	if err != nil {
		return fmt.Errorf("start: read paused kinds: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != phaseNew {
		return fmt.Errorf("start: %w", ErrSchedulerClosed) // Stop ran meanwhile
	}
	s.measureOffset(hostBefore, hostAfter, storeNow)
	s.ev.start()
	s.run = newRuntime(s)
	if paused != nil {
		s.run.pauses.replace(paused, 0)
	}
	s.run.start()
	s.phase = phaseRunning
	s.log.Info("scheduler started", zap.Int("workers", s.cfg.Workers), zap.Int("kinds", len(s.handlers)))
	return nil
}

// Stop stops the Scheduler gracefully, like http.Server.Shutdown: it stops
// claiming, lets running jobs finish until ctx is done, then cancels the
// rest (context.Cause ErrStopping) and hands them back to the store at once,
// as scheduled and without counting the attempt, so another host runs them
// without waiting for their leases to expire. It writes every outcome
// before it lets go of the jobs' leases, so no finished job is run again.
//
// Stop returns nil when everything finished and was written. Otherwise it
// returns ctx.Err() when the deadline cut jobs short, and an error wrapping
// ErrOutcomesNotWritten when outcomes could not be written (their jobs run
// again once their leases expire), joined when both happened.
//
// Stop returns at most Config.ReleaseTimeout after ctx's deadline, whatever
// the store does: handlers that ignore their context, and a store that does
// not answer, are given up on then. With a context that never ends, Stop
// waits for running handlers and for the store as long as it takes. It is
// safe to call twice (the second call waits for the first) and before
// Start; a nil ctx means context.Background().
func (s *Scheduler) Stop(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
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

// checkContext refuses a nil context, which would panic deep in a store
// call.
func checkContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	return nil
}

// newJobID returns a UUIDv7.
func newJobID() (uuid.UUID, error) { return uuid.NewV7() }
