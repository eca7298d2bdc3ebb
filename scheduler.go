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

	// declareMu orders the declaration of flow settings: Start declares
	// the kinds registered before it, Handle after Start its own kind.
	declareMu sync.Mutex
	// capacity wakes Schedule calls waiting for room (backpressure.go).
	capacity capacitySignal
	// kindDefaults caches the kinds' stored defaults for jobs of kinds
	// without a handler here (kinddefaults.go).
	kindDefaults kindDefaultsCache
	// known is the cluster's kinds for Config.RefuseUnknownKinds (nil
	// without it; unhandled.go).
	known *clusterKinds
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
	s.known = newClusterKinds(&s.cfg)
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
// for one kind), ErrSchedulerClosed, or errors.ErrUnsupported (flow
// options on a store without flow control), registering nothing. Handle
// may be called after Start; the kind is claimed from the next claim on,
// and its flow settings are stored first (a store error fails Handle).
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
	if err := s.checkEncryptedKind(&settings); err != nil { // encryption.go
		return fmt.Errorf("handle %q: %w", kind, err)
	}
	for _, check := range settings.storeChecks {
		if err := check(s.store); err != nil {
			return fmt.Errorf("handle %q: %w", kind, err)
		}
	}
	if settings.flowSet {
		if _, err := flowStoreOf(s.store); err != nil {
			return fmt.Errorf("handle %q: %w", kind, err)
		}
		cfg := settings.flow
		cfg.Kind = kind
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("handle %q: %w: %s", kind, ErrInvalidOption, unwrapParams(err))
		}
	}
	wrapped := wrapMiddleware(wrapMiddleware(h, settings.middleware), s.cfg.Middleware)
	kh := &kindHandler{kind: kind, handler: wrapped, settings: settings}

	// Start declares the kinds registered before it runs (it never makes
	// Handle wait); a kind registered once it runs declares itself,
	// before its first claim (declareMu orders two such Handle calls).
	s.declareMu.Lock()
	defer s.declareMu.Unlock()
	s.mu.Lock()
	err := s.canRegister(kind)
	running := s.phase == phaseRunning
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("handle %q: %w", kind, err)
	}
	if running {
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		err := s.declareKinds(ctx, []*kindHandler{kh})
		cancel()
		if err != nil {
			return fmt.Errorf("handle %q: %w", kind, err)
		}
		kh.declared = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.canRegister(kind); err != nil {
		return fmt.Errorf("handle %q: %w", kind, err)
	}
	s.handlers[kind] = kh
	if s.run != nil {
		s.run.wake()
	}
	return nil
}

// canRegister reports why kind cannot be registered now. Called with s.mu
// held.
func (s *Scheduler) canRegister(kind string) error {
	if s.phase >= phaseStopping {
		return ErrSchedulerClosed
	}
	if _, ok := s.handlers[kind]; ok {
		return ErrDuplicateHandler
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
// runs, with the periodic schedules declared so far (Every) recorded in
// the store: their ticks count from then. ctx bounds only the start-up
// (the first calls to the store, whose errors it returns, and the node's
// registration, whose failure it logs: the next heartbeat round tries
// again); the Scheduler runs until Stop. Start after Stop (or while Stop runs) returns
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
	// The schedules declared so far exist in the store once Start
	// returns, counting their ticks from then (periodic.go).
	if err := s.declarePeriodic(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}

	// Flow settings are declared before the first claim, so the store
	// applies this host's settings to its first jobs: those of the kinds
	// registered so far, then of those Handle registered meanwhile, until
	// none is left (the check and the start are one step under s.mu).
	for {
		s.mu.Lock()
		if s.phase != phaseNew {
			s.mu.Unlock()
			return fmt.Errorf("start: %w", ErrSchedulerClosed) // Stop ran meanwhile
		}
		var undeclared []*kindHandler
		for _, h := range s.handlers {
			if !h.declared {
				undeclared = append(undeclared, h)
			}
		}
		if len(undeclared) == 0 {
			break // holding s.mu
		}
		s.mu.Unlock()
		if err := s.declareKinds(ctx, undeclared); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		s.mu.Lock()
		for _, h := range undeclared {
			h.declared = true
		}
		s.mu.Unlock()
	}
	s.measureOffset(hostBefore, hostAfter, storeNow)
	s.ev.start()
	s.run = newRuntime(s)
	if paused != nil {
		s.run.pauses.replace(paused, 0)
	}
	s.run.start()
	s.phase = phaseRunning
	run, kinds := s.run, len(s.handlers)
	s.mu.Unlock()
	// The node is registered before Start returns (the heartbeat reads
	// the kinds under s.mu), so that Nodes lists this host once its Start
	// has returned; the cluster goroutine's first round, running at once,
	// only made that likely (issue 41: a probe listing the nodes right
	// after two hosts started found one, at a load of 3 to 9). It waits
	// no longer than Start's ctx allows, as Start's other store calls:
	// a registration that fails here is logged, and the cluster
	// goroutine's next round tries again.
	regCtx, cancelReg := context.WithCancel(ctx)
	stopReg := context.AfterFunc(run.life, cancelReg)
	run.cluster.heartbeatNode(regCtx)
	stopReg()
	cancelReg()
	s.log.Info("scheduler started", zap.Int("workers", s.cfg.Workers), zap.Int("kinds", kinds))
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
