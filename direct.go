package ax

import (
	"context"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// Direct start: Schedule of one job that is due at once, of a kind this
// host handles, while a worker slot is free and nothing is due and
// waiting, inserts the job already claimed by this host (through
// store.InsertClaimer) and starts it on the slot. The job starts one
// round trip after the call instead of two (the insert, then a claim that
// the insert's wake-up triggers, which may itself wait for a claim in
// flight), and it never passes through the claimable state, so it leaves
// no entry behind in the claim index.
//
// Slots: a claim in flight asked for claimLimit slots (and
// claimKinds[kind] of a kind); a direct start takes only slots beyond
// those, so the two never start more than Workers (or a kind's
// Concurrency) together. Claims still ask for every free slot. (Leaving
// a quarter of the free slots to direct starts was tried: a claim then
// took fewer of the jobs a closing breaker released, and their claim lag
// p99 in axbench flow rose from 7 to 63–156 ms.) So a Schedule during a
// claim waits for the claim to end, up to directClaimWait, and then
// starts its job directly if the claim left a slot and no due job
// behind. Inserting the job for a claim instead costs more: the job
// waits for the claim in flight and then for another, and under load,
// where claims take longer than the gap between Schedule calls, every
// such insert wakes the claimer for a new claim, which the next Schedule
// meets in flight, so direct starts stopped for good (at 500 Schedule
// calls a second, two thirds of them inserted for a claim, start lag p99
// 15-20 ms against 4.8 ms).

// directStart is one Schedule call's reserved slot and, once the store
// answered, the job it claimed.
type directStart struct {
	r    *runtime
	kind string
	rec  *store.JobRecord
	// settled: settle ran, from the store's EarlyStart or after the call.
	settled bool
	started bool // settle's answer
}

// reserveDirect reserves a worker slot for a direct start of p, or
// returns nil when p cannot start directly: no InsertClaimer, Direct
// start off, the runtime not running or stopping, p not due at once or
// needing a claim's decision, its kind not handled here, paused, at its
// cap, or due jobs waiting.
func (s *Scheduler) reserveDirect(ctx context.Context, p *store.InsertParams) *directStart {
	if s.cfg.DisableDirectStart {
		return nil
	}
	s.mu.Lock()
	r, h := s.run, s.handlers[p.Kind]
	running := s.phase == phaseRunning
	s.mu.Unlock()
	if r == nil || h == nil || !running || r.inserter == nil {
		return nil
	}
	// The later of the two clocks: the offset is estimated from claims,
	// whose now() is read early in their round trip, so it errs towards a
	// store behind the host, and a job stamped At(time.Now()) would then
	// look not yet due. The store decides anyway (InsertClaimed inserts
	// a job not due by its clock unclaimed).
	if !p.Claimable(s.now().Add(max(time.Duration(s.storeOffset.Load()), 0))) {
		return nil
	}
	if h.settings.flowSet && !h.settings.flow.InsertsClaimable() {
		return nil // claims decide (the store also refuses settings declared elsewhere)
	}
	if r.pauses.paused(p.Kind) {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for waited := false; ; waited = true {
		if r.stopping || r.moreDue {
			return nil
		}
		if r.free-r.claimLimit >= 1 && h.settings.concurrency-r.busy[p.Kind]-r.claimKinds[p.Kind] >= 1 {
			break
		}
		if r.claimEnded == nil || waited || r.free < 1 || h.settings.concurrency-r.busy[p.Kind] < 1 {
			return nil // busy without a claim, or the claim took the slots
		}
		ended := r.claimEnded
		r.mu.Unlock()
		ok := waitClaim(ctx, ended)
		r.mu.Lock()
		if !ok {
			return nil
		}
	}
	r.free--
	r.busy[p.Kind]++
	r.directs.Add(1) // stopping is false: stop waits after setting it
	return &directStart{r: r, kind: p.Kind}
}

// directClaimWait bounds how long a Schedule call waits for a claim in
// flight to end before it inserts its job for a claim instead: a claim
// takes a round trip, this much only when the store is in trouble.
const directClaimWait = 50 * time.Millisecond

// waitClaim waits until ended is closed, and reports false if ctx ended
// or directClaimWait passed first.
func waitClaim(ctx context.Context, ended <-chan struct{}) bool {
	t := time.NewTimer(directClaimWait)
	defer t.Stop()
	select {
	case <-ended:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// insert is the store call of a direct start, for insertWaiting.
//
// A store that hands the job over before its insert is durable
// (store.EarlyStarter, pgstore.WithEarlyDirectStart) has it
// started from there, while the store waits for the flush; an error from
// that wait then leaves the job running (the reserved slot is its) and
// fails the Schedule call.
func (d *directStart) insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	res, rec, err := d.r.inserter.InsertClaimed(ctx, &params[0], &store.InsertClaim{
		Owner: d.r.cfg.Node, LeaseDuration: d.r.cfg.LeaseDuration, EarlyStart: d})
	if err != nil {
		return nil, err
	}
	if !d.settled {
		d.rec = rec
	}
	return []store.InsertResult{res}, nil
}

// StartEarly implements store.EarlyStarter: the job is committed, not
// yet known durable, and starts now.
func (d *directStart) StartEarly(rec *store.JobRecord) {
	if d.settled || rec == nil {
		return // at most once, by the contract; a nil record starts nothing
	}
	d.rec = rec
	d.settle()
}

// settle starts the claimed job on the reserved slot, or returns the slot
// when the store inserted the job unclaimed (or failed), and reports
// whether the job started here. It acts once: a later call (after an
// early start) only repeats its answer.
func (d *directStart) settle() bool {
	if d.settled {
		return d.started
	}
	d.settled = true
	d.started = d.settleOnce()
	return d.started
}

// settleOnce is settle's first call.
func (d *directStart) settleOnce() bool {
	r := d.r
	defer r.directs.Done()
	if d.rec == nil {
		r.returnSlot(d.kind)
		return false
	}
	if r.pauses.paused(d.kind) {
		// Paused here while the insert was in flight: from the pause on,
		// no attempt of the kind starts on this host (kindpause.go).
		r.returnSlot(d.kind)
		r.handBackUnstarted(unstartedRecords([]*store.JobRecord{d.rec}), "its kind was paused")
		return true
	}
	if !r.startAttempt(d.rec, r.s.now(), time.Time{}) {
		// Stop gave up waiting for this call and no longer waits for
		// handlers: hand the job back at once rather than run it
		// unwatched.
		r.returnSlot(d.kind)
		r.handBackUnstarted(unstartedRecords([]*store.JobRecord{d.rec}), "Stop stopped waiting for its direct start")
	}
	return true
}

// returnSlot gives back a worker slot of kind (freeSlot's, or one
// reserved for a direct start and not used) to the longest waiting job
// taken ahead (takeahead.go), or else to the free slots, and then wakes
// the claimer if jobs were left waiting for one.
func (r *runtime) returnSlot(kind string) {
	r.mu.Lock()
	r.busy[kind]--
	if r.passSlot() {
		r.mu.Unlock()
		return
	}
	r.free++
	wake := r.moreDue || r.capped[kind]
	r.mu.Unlock()
	if wake {
		r.wake()
	}
}

// unstarted is a job this host claimed and will not start.
type unstarted struct {
	lease store.Lease
	kind  string
}

// unstartedRecords lists claimed records for handBackUnstarted.
func unstartedRecords(recs []*store.JobRecord) []unstarted {
	out := make([]unstarted, len(recs))
	for i, rec := range recs {
		out[i] = unstarted{lease: store.Lease{ID: rec.ID, Token: rec.LeaseToken}, kind: rec.Kind}
	}
	return out
}

// handBackUnstarted releases jobs this host claimed but will not start
// (why says the reason), so that they wait as scheduled, due at once and
// with the attempt not counted, instead of until their leases expire. It
// is a rare path and writes at once, bounded by ReleaseTimeout.
func (r *runtime) handBackUnstarted(jobs []unstarted, why string) {
	params := make([]store.FinishParams, len(jobs))
	for i, j := range jobs {
		params[i] = store.FinishParams{Lease: j.lease, Outcome: store.OutcomeRelease}
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ReleaseTimeout)
	defer cancel()
	ok, err := r.store.Finish(ctx, params)
	if err != nil {
		r.log.Error("hand back claimed jobs that will not start here: they are rescued when their leases expire",
			zap.String("reason", why), zap.Int("jobs", len(jobs)), zap.Error(err))
		return
	}
	for i, j := range jobs {
		r.log.Info("claimed job handed back unstarted", zap.Stringer(fieldJobID, j.lease.ID), zap.String(fieldKind, j.kind),
			zap.String("reason", why), zap.Bool("applied", ok[i]))
	}
}
