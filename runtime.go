package ax

import (
	"context"
	"sync"
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

	mu       sync.Mutex
	attempts map[uuid.UUID]*attempt // claimed, until the outcome is written or dropped
	free     int                    // free worker slots
	busy     map[string]int         // running handlers per kind
	moreDue  bool                   // the last claim left due jobs behind

	handlers  sync.WaitGroup
	completer *completer
	heartbeat *heartbeat
	maintStop chan struct{}
	maintDone chan struct{}
	cluster   *cluster

	unsubscribe func()
}

// attempt is one claimed job on this host, from claim until its outcome is
// written (or dropped because the lease was lost or handed back).
type attempt struct {
	job    *Job
	kind   *kindHandler
	lease  store.Lease
	cancel context.CancelCauseFunc

	// Guarded by runtime.mu.
	lastExtended time.Time // host time the lease was last known held
	handlerDone  bool      // the handler returned
	lost         bool      // the lease was lost: the result is discarded
	released     bool      // handed back by Stop: the result is discarded
}

func newRuntime(s *Scheduler) *runtime {
	r := &runtime{
		s:         s,
		store:     s.store,
		cfg:       s.cfg,
		log:       s.log,
		wakeCh:    make(chan struct{}, 1),
		quit:      make(chan struct{}),
		attempts:  make(map[uuid.UUID]*attempt),
		free:      s.cfg.Workers,
		busy:      make(map[string]int),
		maintStop: make(chan struct{}),
		maintDone: make(chan struct{}),
	}
	r.wakeups = newWakeups(s.now, r.wake)
	r.completer = newCompleter(r)
	r.heartbeat = newHeartbeat(r)
	r.cluster = newCluster(r)
	return r
}

// start launches the goroutines. Each has a stop signal and a wait in stop.
func (r *runtime) start() {
	if n, ok := r.store.(store.Notifier); ok {
		r.unsubscribe = n.Subscribe(r.notified)
	}
	r.wakeups.start()
	r.loops.Add(1)
	go func() {
		defer r.loops.Done()
		r.claimLoop()
	}()
	go r.completer.run()
	go r.heartbeat.run()
	go r.maintain()
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
	if n.Kind == "" { // the store may have missed notifications: look now
		r.wake()
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

// cancelLocal cancels the handler of a job running on this host.
func (r *runtime) cancelLocal(id uuid.UUID, cause error) {
	r.mu.Lock()
	a := r.attempts[id]
	r.mu.Unlock()
	if a != nil {
		a.cancel(cause)
	}
}

// stop drains the runtime; see Scheduler.Stop.
func (r *runtime) stop(ctx context.Context) error {
	if r.unsubscribe != nil {
		r.unsubscribe()
	}
	r.stopPeriodic()
	close(r.quit)
	r.loops.Wait()
	r.wakeups.stop()

	handlersDone := make(chan struct{})
	go func() {
		r.handlers.Wait()
		close(handlersDone)
	}()
	var err error
	select {
	case <-handlersDone:
	case <-ctx.Done():
		err = ctx.Err()
		detached, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ReleaseTimeout)
		r.handBack(detached)
		select {
		case <-handlersDone:
		case <-detached.Done():
			r.log.Error("handlers ignored cancellation; abandoning them")
		}
		cancel()
	}
	r.heartbeat.stop()
	r.completer.stop(ctx)
	close(r.maintStop)
	<-r.maintDone
	r.stopCluster()
	r.s.ev.stop()
	return err
}

// handBack cancels every handler still running and releases its job to the
// store at once, attempt not counted, so another host runs it now.
func (r *runtime) handBack(ctx context.Context) {
	var params []store.FinishParams
	r.mu.Lock()
	for _, a := range r.attempts {
		if a.handlerDone || a.lost {
			continue
		}
		a.released = true
		a.cancel(ErrStopping)
		params = append(params, store.FinishParams{Lease: a.lease, Outcome: store.OutcomeRelease})
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
	}
}
