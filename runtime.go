package ax

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// runtime is a started Scheduler's moving parts: the claimer, the workers,
// the heartbeat, the completer, maintenance and wake-ups. It lives from
// Start to Stop.
type runtime struct {
	s     *Scheduler
	store store.Store
	cfg   Config
	log   *zap.Logger

	wakeCh  chan struct{} // a claim is wanted; capacity 1, so signals coalesce
	quit    chan struct{} // closed when Stop begins: no more claims
	loops   sync.WaitGroup
	wakeups *wakeups
	holds   *holds // jobs claimed ahead, until their start times

	// life ends when Stop begins: background work that can simply stop
	// (maintenance, periodic ticks, cluster calls) runs under it.
	life       context.Context
	cancelLife context.CancelFunc
	// work ends when Stop's context ends (or Stop returns): store calls
	// that Stop waits for (an in-flight claim) run under it, so a hung
	// store cannot hold Stop past its deadline.
	work       context.Context
	cancelWork context.CancelFunc

	// starting counts the attempts launched to start at once whose
	// goroutines have not run yet; the one that brings it to zero sends
	// on launchedRan (capacity 1), which the claim loop waits for
	// (launchwait.go).
	starting    atomic.Int64
	launchedRan chan struct{}

	mu       sync.Mutex
	attempts map[store.Lease]*attempt // claimed, until the outcome is written or discarded
	free     int                      // free worker slots
	busy     map[string]int           // running handlers per kind
	moreDue  bool                     // the last claim left claimable jobs behind
	capped   map[string]bool          // kinds left out of the last claim at their Concurrency cap
	// waiting are the jobs taken ahead of the free slots, in launch
	// order, until a slot frees for each; handlerMean the recent mean
	// duration of handlers (takeahead.go).
	waiting     []*attempt
	handlerMean time.Duration
	// staleWake is the wake-up armed for the earliest waitUntil of the
	// waiting jobs (zero: none), when they are handed back.
	staleWake time.Time
	// A claim in flight asked for claimLimit slots, claimKinds[kind] of
	// a kind: direct starts take only slots beyond them (direct.go).
	claimLimit int
	claimKinds map[string]int
	// claimEnded is closed when the claim in flight ends (nil: none), for
	// a direct start waiting for the slots it asked for.
	claimEnded chan struct{}
	// breakerHeld counts, per kind with a breaker, the failed outcomes
	// queued and not yet written: claims leave the kind out meanwhile
	// (breaker.go).
	breakerHeld map[string]int
	// stopping: Stop began, no more direct starts are reserved;
	// launchClosed: Stop no longer waits for handlers, nothing starts.
	stopping     bool
	launchClosed bool

	handlers  sync.WaitGroup
	directs   sync.WaitGroup // Schedule calls holding a reserved slot (direct.go)
	inserter  store.InsertClaimer
	riders    store.FinishClaimer // outcomes ride with backlog claims (ride.go), or nil
	completer *completer
	heartbeat *heartbeat
	maintDone chan struct{}
	cluster   *cluster
	pauses    *kindPauses // the cluster's paused kinds (kindpause.go)
	// flow is the store's flow control, or nil; ageAfter the priority
	// aging bound of claims (zero: strict priorities).
	flow     store.FlowStore
	ageAfter time.Duration

	unsubscribe func()

	// slowClaims are the slowest claim calls of the last seconds, which
	// set how far ahead claims take jobs; storeAhead the largest lower
	// bounds of the store's clock minus the host's the recent claims gave,
	// which set when jobs claimed ahead start (claimer.go). Only the claim
	// loop touches them. expectNext is the NextRunAt of the last claim
	// (store clock; zero: none), by which the next claim tells a race it
	// lost to another host (lostRace).
	slowClaims recentMax
	storeAhead recentMax
	expectNext time.Time
	// lastClaimTook is how long the last claim call took (claim loop
	// only), for how far ahead of its slots a claim takes (takeahead.go).
	lastClaimTook time.Duration
}

func newRuntime(s *Scheduler) *runtime {
	r := &runtime{
		s:           s,
		store:       s.store,
		cfg:         s.cfg,
		log:         s.log,
		wakeCh:      make(chan struct{}, 1),
		launchedRan: make(chan struct{}, 1),
		quit:        make(chan struct{}),
		attempts:    make(map[store.Lease]*attempt),
		free:        s.cfg.Workers,
		busy:        make(map[string]int),
		capped:      make(map[string]bool),
		claimKinds:  make(map[string]int),
		maintDone:   make(chan struct{}),
	}
	r.life, r.cancelLife = context.WithCancel(context.Background())
	r.work, r.cancelWork = context.WithCancel(context.Background())
	r.wakeups = newWakeups(s.now, r.wake)
	r.holds = newHolds(s.now)
	r.completer = newCompleter(r)
	r.heartbeat = newHeartbeat(r)
	r.cluster = newCluster(r)
	r.pauses = newKindPauses(r)
	if ic, ok := s.store.(store.InsertClaimer); ok {
		r.inserter = ic
	}
	if fc, ok := s.store.(store.FinishClaimer); ok && s.cfg.OutcomesWithClaims {
		r.riders = fc
	}
	if fs, ok := s.store.(store.FlowStore); ok {
		r.flow = fs
		r.ageAfter = max(s.cfg.PriorityAging, 0)
	}
	return r
}

// start launches the goroutines. Each has a stop signal and a wait in stop.
func (r *runtime) start() {
	if n, ok := r.store.(store.Notifier); ok {
		r.unsubscribe = n.Subscribe(r.notified)
	}
	r.wakeups.start()
	r.holds.start()
	r.loops.Add(1)
	go func() {
		defer r.loops.Done()
		r.claimLoop()
	}()
	go r.completer.run()
	go r.heartbeat.run()
	go r.maintain()
	go r.pauses.run()
	r.startCluster()
	r.startPeriodic()
	r.wake()
}

// wake asks the claimer for a claim round; it never blocks.
func (r *runtime) wake() {
	select {
	case r.wakeCh <- struct{}{}:
	default:
	}
}

// wakeAt asks for a claim round at host time t.
func (r *runtime) wakeAt(t time.Time) {
	if !t.After(r.s.now()) {
		r.wake()
		return
	}
	r.wakeups.add(t)
}

// notified turns a store notification into a wake-up, if this host handles
// the kind and the jobs are due within the lookahead.
func (r *runtime) notified(n store.Notification) {
	if n.Kind == "" {
		// The store may have missed notifications, or a kind was
		// resumed: re-read the paused kinds, then look now.
		r.pauses.requestReread()
		return
	}
	if r.s.handler(n.Kind) == nil {
		return
	}
	t := r.s.hostTime(n.RunAt)
	if t.Sub(r.s.now()) > lookahead {
		return // the claim rounds learn of it in time
	}
	r.wakeAt(t)
}

// cancelLocal cancels the handlers of a job running on this host.
func (r *runtime) cancelLocal(id uuid.UUID, cause error) {
	r.mu.Lock()
	running := r.runningAttemptsOf(id)
	r.mu.Unlock()
	for _, a := range running {
		a.cancel(cause)
	}
}

// stop drains the runtime; see Scheduler.Stop. In order:
//
//  1. no more claims, periodic ticks, paused-kind reads or maintenance;
//  2. running handlers finish until ctx ends; then the rest are cancelled
//     and handed back to the store, and waited for until the grace
//     deadline (ctx's end plus ReleaseTimeout);
//  3. the completer writes every queued outcome, retrying a failing store
//     until ctx ends, then until the grace deadline;
//  4. only then the heartbeat stops: until their outcomes are written, the
//     jobs stay leased, so no other host reruns a job that succeeded here;
//  5. the cluster membership ends (leadership released, node stopped).
//
// It returns by the grace deadline whatever the store does.
func (r *runtime) stop(ctx context.Context) error {
	grace, cancelGrace := graceContext(ctx, r.cfg.ReleaseTimeout)
	defer cancelGrace()
	stopWork := context.AfterFunc(ctx, r.cancelWork)
	defer stopWork()
	defer r.cancelWork()

	if r.unsubscribe != nil {
		r.unsubscribe()
	}
	var errs []error
	r.cancelLife()
	r.mu.Lock()
	r.stopping = true // no more direct starts
	r.mu.Unlock()
	<-r.pauses.done
	r.stopPeriodic()
	close(r.quit)
	r.loops.Wait()
	r.wakeups.stop()
	// Schedule calls starting jobs directly: until ctx ends (a hung
	// store), then whatever they claim is handed back instead.
	directsDone := waitGroupUntil(&r.directs, ctx)
	r.mu.Lock()
	r.launchClosed = true
	r.mu.Unlock()
	if !directsDone {
		errs = append(errs, ctx.Err())
	}

	if !waitGroupUntil(&r.handlers, ctx) {
		if directsDone {
			errs = append(errs, ctx.Err())
		}
		r.handBack(grace)
		if !waitGroupUntil(&r.handlers, grace) {
			r.log.Error("handlers ignored cancellation; abandoning them")
		}
	}
	// After the handlers: a job claimed ahead waits for its release (or
	// its cancellation) like a running one.
	r.holds.stop()
	if n := r.completer.stop(ctx, grace); n > 0 {
		errs = append(errs, fmt.Errorf("%w: %d outcome(s); their jobs run again once their leases expire", ErrOutcomesNotWritten, n))
	}
	r.heartbeat.stop()
	<-r.maintDone
	r.stopCluster(grace)
	r.s.ev.stop()
	return errors.Join(errs...)
}

// graceContext returns a context that ends grace after ctx ends: the
// deadline of what Stop still does once its own deadline passed.
func graceContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
	)
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, cancel)
	})
	return g, func() {
		stopAfter()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// waitGroupUntil waits for wg until ctx ends and reports whether wg was
// done.
func waitGroupUntil(wg *sync.WaitGroup, ctx context.Context) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// handBack cancels every handler still running and releases its job to the
// store at once, attempt not counted, so another host runs it now.
func (r *runtime) handBack(ctx context.Context) {
	var (
		params []store.FinishParams
		jobs   []*Job
	)
	r.mu.Lock()
	for _, a := range r.attempts {
		if a.state != attemptRunning || a.lost || a.released {
			continue // ended, or handed back already (a pause, a wait too long)
		}
		a.released = true
		a.cancel(ErrStopping)
		params = append(params, store.FinishParams{Lease: a.lease, Outcome: store.OutcomeRelease})
		jobs = append(jobs, a.job)
	}
	r.mu.Unlock()
	if len(params) == 0 {
		return
	}
	ok, err := r.store.Finish(ctx, params)
	if err != nil {
		r.log.Error("hand back unfinished jobs: they will be rescued when their leases expire",
			zap.Int("jobs", len(params)), zap.Error(err))
		return
	}
	for i, p := range params {
		r.log.Info("job handed back", zap.Stringer(fieldJobID, p.Lease.ID), zap.Bool("applied", ok[i]))
		if j := jobs[i]; ok[i] {
			r.s.emit(Event{Kind: EventHandedBack, JobID: j.ID, JobKind: j.Kind, Attempt: j.Attempt, Metadata: j.Metadata})
		}
	}
}
