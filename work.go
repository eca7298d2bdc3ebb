package ax

import (
	"context"
	"errors"
	"fmt"

	"github.com/axsched/ax/store"
)

// ErrSchedulerRunning is returned by RunDue on a started Scheduler, whose
// own workers run its jobs.
var ErrSchedulerRunning = errors.New("ax: scheduler is running")

// MaxRunDue bounds the attempts one RunDue call runs, so a handler that
// snoozes or retries at once forever cannot hang a test.
const MaxRunDue = 100_000

// RunDue runs the jobs that are due now, one at a time, on the calling
// goroutine, and returns how many attempts it ran.
//
// It first fires the periodic schedules' due ticks (Every), as a started
// Scheduler's periodic loop waking now would: once, each schedule's
// MisfirePolicy applying to the ticks passed since the previous call; a
// schedule the store does not know yet counts its ticks from its Every
// call. Then it claims the earliest due job of the kinds this Scheduler
// handles (by priority, then run_at), calls its handler (with its
// middleware and timeout), writes its outcome, and goes on until none is
// due — including retries and snoozes that fall due meanwhile (with the
// store's clock as it is). It is deterministic for a given store and
// clock, which is what tests want (see package axtest); nothing runs
// concurrently with the handlers.
//
// It is for a Scheduler that was not started (ErrSchedulerRunning
// otherwise) and that has not stopped (ErrSchedulerClosed). ctx bounds the
// whole call and is the handlers' parent context. After MaxRunDue attempts
// it stops with an error.
func (s *Scheduler) RunDue(ctx context.Context) (int, error) {
	if err := checkContext(ctx); err != nil {
		return 0, fmt.Errorf("run due jobs: %w", err)
	}
	s.mu.Lock()
	ph := s.phase
	s.mu.Unlock()
	switch ph {
	case phaseRunning:
		return 0, fmt.Errorf("run due jobs: %w", ErrSchedulerRunning)
	case phaseStopping, phaseStopped:
		return 0, fmt.Errorf("run due jobs: %w", ErrSchedulerClosed)
	}
	if err := s.firePeriodicDue(ctx); err != nil {
		return 0, fmt.Errorf("run due jobs: %w", err)
	}
	for n := 0; ; n++ {
		if n == MaxRunDue {
			return n, fmt.Errorf("run due jobs: still due after %d attempts", MaxRunDue)
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
		ran, err := s.runOneDue(ctx)
		if err != nil || !ran {
			return n, err
		}
	}
}

// RunNextDue is RunDue for one attempt: it fires the due periodic ticks,
// runs the job due first, if any, and reports whether there was one.
func (s *Scheduler) RunNextDue(ctx context.Context) (bool, error) {
	if err := checkContext(ctx); err != nil {
		return false, fmt.Errorf("run next due job: %w", err)
	}
	s.mu.Lock()
	ph := s.phase
	s.mu.Unlock()
	switch ph {
	case phaseRunning:
		return false, fmt.Errorf("run next due job: %w", ErrSchedulerRunning)
	case phaseStopping, phaseStopped:
		return false, fmt.Errorf("run next due job: %w", ErrSchedulerClosed)
	}
	if err := s.firePeriodicDue(ctx); err != nil {
		return false, fmt.Errorf("run next due job: %w", err)
	}
	return s.runOneDue(ctx)
}

// runOneDue claims and runs the earliest due job, if any.
func (s *Scheduler) runOneDue(ctx context.Context) (bool, error) {
	kinds := s.kinds()
	params := &store.ClaimParams{Owner: s.cfg.Node, LeaseDuration: s.cfg.LeaseDuration, Limit: 1}
	for _, k := range kinds {
		params.Kinds = append(params.Kinds, store.KindLimit{Kind: k.kind, Limit: 1})
	}
	if len(params.Kinds) == 0 {
		return false, nil
	}
	res, err := s.store.Claim(ctx, params)
	if err != nil {
		return false, fmt.Errorf("run due jobs: claim: %w", err)
	}
	if len(res.Jobs) == 0 {
		return false, nil
	}
	rec := res.Jobs[0]
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := &attempt{job: jobFromRecord(rec), kind: s.handler(rec.Kind), lease: store.Lease{ID: rec.ID, Token: rec.LeaseToken}, cancel: cancel}
	a.extras = &attemptExtras{s: s, a: a}
	hctx = context.WithValue(hctx, attemptKey{}, a.extras)
	start := s.now()
	err = callHandler(hctx, a)
	cp := completion{attempt: a, err: err, took: s.now().Sub(start), inTx: a.extras.txCompleted()}
	cp.params = outcome(a, err, context.Cause(hctx))
	// The write must not fail because ctx ended during the handler: the
	// job would stay running until its lease expired.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer wcancel()
	ok, err := s.store.Finish(wctx, []store.FinishParams{cp.params})
	if err != nil {
		return true, fmt.Errorf("run due jobs: write outcome of job %s: %w", rec.ID, err)
	}
	r := &runtime{s: s, log: s.log}
	r.logOutcome(cp, ok[0])
	r.emitOutcome(cp, ok[0])
	return true, nil
}
