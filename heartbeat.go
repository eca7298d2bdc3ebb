package ax

import (
	"context"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// heartbeat extends the leases of every job this host holds (handlers
// running, and outcomes not yet written), in one store call per beat, and
// cancels the handlers of jobs whose lease is lost (taken over by another
// host: rescued, re-claimed, pruned) or whose cancellation was requested.
// A lease the store reports finished by its own outcome (ExtendResult.
// Finished: the handler's CompleteTx committed and the handler has not
// returned yet) is not lost, and neither is one the store skipped because
// another transaction holds the job's row. If the store cannot be reached for a whole lease, the host
// assumes its leases lapsed (another host may have rescued the jobs) and
// cancels those handlers itself: a partitioned or paused host stops working
// on jobs it may no longer own.
type heartbeat struct {
	r    *runtime
	quit chan struct{}
	done chan struct{}
	// life ends when stop begins, and with it an extension in flight:
	// stop runs once the handlers ended and their outcomes were written
	// or given up, so nothing is left for it to keep alive.
	life context.Context
	end  context.CancelFunc
}

func newHeartbeat(r *runtime) *heartbeat {
	life, end := context.WithCancel(context.Background())
	return &heartbeat{r: r, quit: make(chan struct{}), done: make(chan struct{}), life: life, end: end}
}

func (h *heartbeat) run() {
	defer close(h.done)
	t := time.NewTicker(h.r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-h.quit:
			return
		case <-t.C:
			h.beat()
		}
	}
}

// stop stops the heartbeat, ending an extension in flight, and waits for
// its goroutine.
func (h *heartbeat) stop() {
	close(h.quit)
	h.end()
	<-h.done
}

// beat extends all held leases once. The extension may take until the
// oldest of them lapses (keepAliveTimeout): a store slower than
// HeartbeatInterval still extends them, and the next beat waits for it.
func (h *heartbeat) beat() {
	r := h.r
	now := r.s.now()
	var leases []store.Lease
	oldest := now
	r.mu.Lock()
	for _, a := range r.attempts {
		if !a.extendable() {
			continue
		}
		if now.Sub(a.lastExtended) > r.cfg.LeaseDuration && a.state == attemptRunning {
			h.lose(a, "lease not extended for longer than LeaseDuration")
			continue
		}
		leases = append(leases, a.lease)
		if a.lastExtended.Before(oldest) {
			oldest = a.lastExtended
		}
	}
	r.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(h.life,
		keepAliveTimeout(r.cfg.HeartbeatInterval, now, oldest.Add(r.cfg.LeaseDuration)))
	defer cancel()
	before := r.s.now()
	res, err := r.store.ExtendLeases(ctx, &store.ExtendParams{Leases: leases, Duration: r.cfg.LeaseDuration})
	if err != nil {
		if h.life.Err() == nil {
			r.log.Warn("extend leases failed", zap.Int("jobs", len(leases)), zap.Error(err))
		}
		return
	}
	lost := make(map[store.Lease]bool, len(res.Lost))
	for _, l := range res.Lost {
		lost[l] = true
	}
	for _, l := range res.Finished {
		// The attempt's own outcome ended the job (a handler's committed
		// CompleteTx, before the handler returned; an outcome whose write
		// is in flight): not taken over, so not lost.
		lost[l] = false
	}
	var cancelled []*attempt
	r.mu.Lock()
	for _, l := range leases {
		a := r.attempts[l]
		if a == nil {
			continue // written meanwhile
		}
		if !lost[l] {
			// The store extended the lease from its now, which is after
			// before; or it found the job's row held by another
			// transaction (the handler's CompleteTx, not yet committed),
			// which no rescue can take while it lasts; or the lease's own
			// outcome ended the job. Either way the job is not another
			// host's.
			a.lastExtended = before
			continue
		}
		if a.state == attemptRunning && !a.released {
			h.lose(a, "store reports the lease lost")
		}
	}
	for _, l := range res.CancelRequested {
		if a := r.attempts[l]; a != nil && a.state == attemptRunning {
			cancelled = append(cancelled, a)
		}
	}
	r.mu.Unlock()
	for _, a := range cancelled {
		a.cancel(ErrJobCancelled)
	}
}

// lose marks an attempt's lease lost and cancels its handler. Called with
// runtime.mu held.
func (h *heartbeat) lose(a *attempt, why string) {
	a.lost = true
	a.cancel(ErrLeaseLost)
	h.r.s.emit(Event{Kind: EventLeaseLost, JobID: a.job.ID, JobKind: a.job.Kind, Attempt: a.job.Attempt, Metadata: a.job.Metadata})
	h.r.log.Error("job lease lost; handler cancelled and its result will be discarded",
		append(jobFields(a.job), zap.String("reason", why))...)
}
