package ax

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// launch starts a claimed job on a worker goroutine, whose handler starts
// at startAt (host clock; zero or past: at once) for a job claimed ahead,
// in a free worker slot, or, with none free, in the next to free (a job
// taken ahead of the free slots: takeahead.go).
func (r *runtime) launch(rec *store.JobRecord, hostNow, startAt time.Time) {
	var waitUntil time.Time
	r.mu.Lock()
	if r.free < 1 {
		waitUntil = hostNow.Add(aheadWaitLimit(r.lastClaimTook))
	} else {
		r.free--
	}
	r.busy[rec.Kind]++
	r.mu.Unlock()
	r.startAttemptIn(rec, hostNow, startAt, waitUntil)
}

// startAttempt runs a claimed job on a worker slot already taken for it, and
// reports false, doing nothing, once Stop no longer waits for handlers
// (a direct start that outlived Stop's wait for it; claims end before).
func (r *runtime) startAttempt(rec *store.JobRecord, hostNow, startAt time.Time) bool {
	return r.startAttemptIn(rec, hostNow, startAt, time.Time{})
}

// startAttemptIn is startAttempt, for a job taken ahead that waits for the
// next worker slot to free when waitUntil is set, and is handed back if
// none frees by then (handBackStaleAhead).
func (r *runtime) startAttemptIn(rec *store.JobRecord, hostNow, startAt, waitUntil time.Time) bool {
	job := jobFromRecord(rec)
	kh := r.s.handler(rec.Kind)
	ctx, cancel := context.WithCancelCause(context.Background())
	both := &struct { // one allocation for the two, on every job's path
		a attempt
		x attemptExtras
	}{a: attempt{
		job:          job,
		kind:         kh,
		lease:        store.Lease{ID: rec.ID, Token: rec.LeaseToken},
		cancel:       cancel,
		startAt:      startAt,
		lastExtended: hostNow,
	}}
	a := &both.a
	both.x.s, both.x.a = r.s, a
	a.extras = &both.x
	ctx = context.WithValue(ctx, attemptKey{}, a.extras)
	r.mu.Lock()
	if r.launchClosed {
		r.mu.Unlock()
		cancel(nil)
		return false
	}
	r.register(a)
	if !waitUntil.IsZero() {
		a.slot, a.waitsForSlot, a.waitUntil = make(chan struct{}), true, waitUntil
		r.waiting = append(r.waiting, a)
	}
	r.handlers.Add(1) // under mu: stop sets launchClosed before it waits
	r.mu.Unlock()
	if startAt.IsZero() {
		r.starting.Add(1) // until execute runs (launchwait.go)
	}
	go r.execute(ctx, a)
	return true
}

// execute runs one attempt and queues its outcome. An attempt claimed
// ahead of its run time waits for it first; one cancelled, lost or handed
// back meanwhile ends without calling its handler.
func (r *runtime) execute(ctx context.Context, a *attempt) {
	if a.startAt.IsZero() && r.starting.Add(-1) == 0 {
		select {
		case r.launchedRan <- struct{}{}:
		default: // a signal is pending already
		}
	}
	defer r.handlers.Done()
	defer a.cancel(nil)
	if !r.waitForSlot(ctx, a) || !r.holdUntilStart(ctx, a) {
		cause := context.Cause(ctx)
		r.finish(a, cause, cause, 0)
		return
	}
	if (!a.startAt.IsZero() || a.slot != nil) && r.handBackHeld(a) {
		return // its kind was paused here while it waited (kindpause.go)
	}
	start := r.s.now()
	job := a.job
	lag := startLag(start, r.s.hostTime(job.RunAt), a.startAt)
	if ce := r.log.Check(zap.DebugLevel, "job started"); ce != nil {
		ce.Write(append(jobFields(job), zap.Float64(fieldLagMS, ms(lag)), zap.Float64(fieldClaimLagMS, ms(job.ClaimLag())))...)
	}
	r.s.emit(Event{Kind: EventStarted, JobID: job.ID, JobKind: job.Kind, Attempt: job.Attempt, Metadata: job.Metadata,
		StartLag: lag, ClaimLag: job.ClaimLag()})
	err := callOpened(ctx, a, r.s.cfg.Keys, r.s.cfg.KeyMissingDelay) // encryption.go
	if err == nil {
		err = r.resolveThen(ctx, a)
	}
	r.finish(a, err, context.Cause(ctx), r.s.now().Sub(start))
}

// resolveThen completes the Then jobs of an attempt whose handler
// returned nil, with the store calls Then left for the outcome (result.go),
// unless CompleteTx wrote the outcome already. The handler has returned:
// no transaction of its holds a connection now. The read is not cut short
// by a Stop that begins meanwhile, only bounded by the lease.
func (r *runtime) resolveThen(ctx context.Context, a *attempt) error {
	x := a.extras
	if x == nil {
		return nil
	}
	x.mu.Lock()
	then, inTx := x.then, x.completedTx
	x.mu.Unlock()
	if len(then) == 0 || inTx {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.cfg.LeaseDuration)
	defer cancel()
	then, err := r.s.resolveThen(ctx, then)
	if err != nil {
		return err
	}
	x.mu.Lock()
	x.then = then
	x.mu.Unlock()
	return nil
}

// startLag is how late an attempt started at start (host clock) whose
// run time is runAt converted with the measured clock offset. An attempt
// held until startAt (not zero) was released at a moment by which the
// store's clock had reached its RunAt: it is at least start − startAt
// late and never early, whatever the offset estimate (taken from claims,
// which read the store's clock early in their round trip) says.
func startLag(start, runAt, startAt time.Time) time.Duration {
	lag := start.Sub(runAt)
	if !startAt.IsZero() {
		lag = max(lag, start.Sub(startAt))
	}
	return lag
}

// holdUntilStart waits until a's start time, and reports false if ctx
// ended first.
func (r *runtime) holdUntilStart(ctx context.Context, a *attempt) bool {
	if !a.startAt.After(r.s.now()) {
		return true // due: start at once
	}
	select {
	case <-r.holds.add(a.startAt):
		return true
	case <-ctx.Done():
		return false
	}
}

// callHandler calls the kind's handler under its timeout, recovering panics
// into a PanicError.
func callHandler(ctx context.Context, a *attempt) (err error) {
	ctx, cancel := context.WithTimeout(ctx, a.kind.settings.timeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	err = a.kind.handler.Work(ctx, a.job)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("timeout after %s: %w", a.kind.settings.timeout, err)
	}
	return err
}

// finish queues the attempt's outcome, unless the lease was lost or handed
// back, when the result must not be written, and then frees the worker
// slot.
//
// The worker slot is freed only once the outcome is queued: while the
// store is slow to take outcomes the completer's queue fills, workers
// wait here, and the claimer stops taking jobs, so the jobs in flight stay
// bounded (Workers running, the jobs taken ahead, and a queue of
// outcomeQueueCapacity outcomes).
func (r *runtime) finish(a *attempt, err, cause error, took time.Duration) {
	defer r.freeSlot(a)
	cp := completion{attempt: a, err: err, took: took, inTx: a.extras != nil && a.extras.txCompleted()}
	r.mu.Lock()
	r.addHandlerTime(took)
	discard := a.lost || a.released
	if discard {
		r.unregister(a)
	} else {
		a.state = attemptQueued
	}
	r.mu.Unlock()
	if discard {
		// Debug: the lease loss was already logged at error, and a hand-back
		// at Stop is not a failure.
		if ce := r.log.Check(zap.DebugLevel, "attempt result discarded: lease lost or handed back"); ce != nil {
			ce.Write(cp.fields()...)
		}
		return
	}
	cp.params = outcome(a, err, cause)
	r.completer.add(cp)
}

// discard drops an attempt whose outcome will not be written: its lease is
// no longer extended, so the store rescues the job once the lease expires.
func (r *runtime) discard(a *attempt) {
	r.mu.Lock()
	r.unregister(a)
	r.mu.Unlock()
}

// freeSlot returns an attempt's worker slot and wakes the claimer if due
// jobs were left waiting for one: any kind's when the last claim had more
// due than slots, or this kind's when it was left out at its Concurrency
// cap (the claim could not see whether it had due jobs).
func (r *runtime) freeSlot(a *attempt) {
	r.mu.Lock()
	if a.noSlot {
		// Taken ahead and ended while it waited: it held no slot,
		// only its place in its kind's count.
		r.busy[a.job.Kind]--
		wake := r.capped[a.job.Kind]
		r.mu.Unlock()
		if wake {
			r.wake()
		}
		return
	}
	r.mu.Unlock()
	r.returnSlot(a.job.Kind)
}

// errTxNotCommitted is the attempt error written when a handler called
// CompleteTx and returned, but its transaction did not commit: the write
// applies only then (a committed transaction already ended the job's
// lease), and the job is retried.
const errTxNotCommitted = "ax: CompleteTx was called but its transaction did not commit"

// outcome decides what an attempt's result does to the job, with fields
// the store can keep: the error text is valid UTF-8 without NUL bytes and
// at most store.MaxErrorLength bytes, and delays are never negative (a
// SnoozeError built by hand or a RetryPolicy may give any value). A result
// and follow-ups recorded by the handler go with it (follow-ups only with
// a success).
func outcome(a *attempt, err, cause error) store.FinishParams {
	p := store.FinishParams{Lease: a.lease}
	if x := a.extras; x != nil {
		x.mu.Lock()
		if err == nil && x.resultErr != nil {
			err = x.resultErr
		}
		p.Result = x.result
		if err == nil {
			p.Then = x.then
		}
		inTx := x.completedTx
		x.mu.Unlock()
		if inTx && err == nil {
			p.Outcome, p.Error, p.Result, p.Then = store.OutcomeRetry, errTxNotCommitted, nil, nil
			return p
		}
	}
	var snooze *SnoozeError
	switch {
	case err == nil:
		p.Outcome = store.OutcomeSucceeded
	case errors.Is(cause, ErrJobCancelled):
		p.Outcome = store.OutcomeCancelled
	case errors.As(err, &snooze):
		p.Outcome, p.Delay = store.OutcomeSnooze, max(snooze.Delay, 0)
	case errors.Is(err, ErrSkipRetry), a.job.Attempt >= a.job.MaxAttempts:
		p.Outcome = store.OutcomeDead
	default:
		p.Outcome = store.OutcomeRetry
		p.Delay = max(a.kind.settings.retry.NextRetry(a.job.Attempt, err), 0)
	}
	if err != nil && snooze == nil {
		p.Error = store.TruncateText(err.Error(), store.MaxErrorLength)
	}
	return p
}

// ms converts a duration to fractional milliseconds for logs.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
