package memstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// ExtendLeases sets the expiry of every lease still held (job running under
// that token) to the store's now + params.Duration, in one operation. A
// lease is reported in Lost when its job is not found, not running, or runs
// under another token; held leases whose job has a cancel requested are
// reported in CancelRequested. A lost lease whose job left running through
// a Finish with that very lease is reported in Finished too. A lease past
// its expiry is still held until RescueExpired takes it back. A nil params
// or a Duration <= 0 fails with an error wrapping store.ErrInvalidParams.
func (s *Store) ExtendLeases(ctx context.Context, params *store.ExtendParams) (*store.ExtendResult, error) {
	if params == nil {
		return nil, fmt.Errorf("extend leases: %w: nil params", store.ErrInvalidParams)
	}
	if params.Duration <= 0 {
		return nil, fmt.Errorf("extend leases: %w: lease duration %s <= 0", store.ErrInvalidParams, params.Duration)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	defer s.mu.Unlock()
	expires := stamp(s.clock().Add(params.Duration))
	res := &store.ExtendResult{}
	for _, l := range params.Leases {
		j := s.held(l)
		if j == nil {
			res.Lost = append(res.Lost, l)
			if e := s.jobs[l.ID]; e != nil && e.rec.State != store.StateRunning && l.Token != uuid.Nil && e.ended == l.Token {
				res.Finished = append(res.Finished, l)
			}
			continue
		}
		j.rec.LeaseExpiresAt = expires
		s.leases.fix(j)
		if j.rec.CancelRequested {
			res.CancelRequested = append(res.CancelRequested, l)
		}
	}
	return res, nil
}

// held returns the job running under lease l, or nil.
func (s *Store) held(l store.Lease) *job {
	j := s.jobs[l.ID]
	if j == nil || j.rec.State != store.StateRunning || j.rec.LeaseToken != l.Token {
		return nil
	}
	return j
}

// Finish records attempt outcomes in one operation, as store.Store.Finish
// documents. Every row is checked with FinishParams.Validate first; one bad
// row fails the whole call with an error wrapping store.ErrInvalidParams and
// nothing is applied. ok[i] is false, and nothing changed for that row, when
// params[i].Lease is no longer held (a lease listed twice is applied once,
// for its first row). Applied rows leave running (LeaseToken,
// LeaseExpiresAt, CancelRequested and PauseRequested cleared, Owner kept)
// for:
//
//   - OutcomeSucceeded: succeeded, FinishedAt = now.
//   - OutcomeRetry: retrying, run_at = now + Delay.
//   - OutcomeDead: dead, FinishedAt = now.
//   - OutcomeSnooze: scheduled, run_at = now + Delay, Attempt - 1.
//   - OutcomeRelease: scheduled, run_at = now, Attempt - 1.
//   - OutcomeCancelled: cancelled, FinishedAt = now, unique key released.
//
// Retry, snooze and release of a job whose cancel was requested become
// cancelled (attempt kept); otherwise, for a job whose pause was requested,
// they become paused with the run_at and attempt the outcome sets. Retry,
// dead and cancelled outcomes append AttemptError{Attempt, now, Error, Owner, AttemptedAt} to
// the job's errors. Subscribers are notified of jobs made retrying or
// scheduled, never of paused ones, and of the kinds whose flow settings
// held jobs back until a running job ended.
//
// Each applied row feeds its kind's circuit breaker, in the order of
// params (see store.BreakerStatus.Observe): succeeded counts as a success,
// retry and dead as failures, whatever the job became.
func (s *Store) Finish(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	ok, _, err := s.finish(ctx, params)
	return ok, err
}

// finish is Finish, returning the breaker transitions too.
func (s *Store) finish(ctx context.Context, params []store.FinishParams) ([]bool, []store.BreakerTransition, error) {
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return nil, nil, fmt.Errorf("finish jobs: row %d: %w", i, err)
		}
	}
	ok := make([]bool, len(params))
	if err := s.lock(ctx); err != nil {
		return nil, nil, fmt.Errorf("finish jobs: %w", err)
	}
	var transitions []store.BreakerTransition
	now := s.clock()
	var ns notes
	notify := s.subs.any()
	for i := range params {
		p := &params[i]
		j := s.held(p.Lease)
		if j == nil {
			continue
		}
		ok[i] = true
		s.unindex(j)
		r := &j.rec
		out := p.Outcome
		if t := s.observeBreaker(r.Kind, out, now); t != nil {
			transitions = append(transitions, *t)
		}
		if t := s.observePartBreaker(r, out, now); t != nil {
			transitions = append(transitions, *t)
		}
		switch out {
		case store.OutcomeRetry, store.OutcomeDead, store.OutcomeCancelled:
			r.Errors = append(r.Errors, store.AttemptError{Attempt: r.Attempt, At: now, Error: p.Error, Node: r.Owner, StartedAt: r.AttemptedAt})
		}
		if out == store.OutcomeSnooze {
			r.Snoozes, r.SnoozedAt = r.Snoozes+1, now
		}
		reschedules := out == store.OutcomeRetry || out == store.OutcomeSnooze || out == store.OutcomeRelease
		if r.CancelRequested && reschedules {
			out = store.OutcomeCancelled
		}
		paused := r.PauseRequested && reschedules
		j.ended = r.LeaseToken
		leaveRunning(r)
		switch out {
		case store.OutcomeSucceeded:
			r.State, r.FinishedAt = store.StateSucceeded, now
		case store.OutcomeRetry:
			r.State, r.RunAt = store.StateRetrying, stamp(now.Add(p.Delay))
		case store.OutcomeDead:
			r.State, r.FinishedAt = store.StateDead, now
		case store.OutcomeSnooze:
			r.State, r.RunAt = store.StateScheduled, stamp(now.Add(p.Delay))
			r.Attempt = max(r.Attempt-1, 0)
		case store.OutcomeRelease:
			r.State, r.RunAt = store.StateScheduled, now
			r.Attempt = max(r.Attempt-1, 0)
		case store.OutcomeCancelled:
			r.State, r.FinishedAt = store.StateCancelled, now
		}
		if paused && !r.State.Final() {
			// The outcome set run_at and attempt; the pause holds the job
			// there instead of letting it be claimed.
			r.State = store.StatePaused
		}
		s.index(j)
		if notify && r.State.Claimable() {
			ns.add(r.Kind, r.RunAt)
		}
		s.finishExtras(j, p, now, &ns)
		if r.State.Final() {
			s.finalized(j, now, &ns)
		}
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return ok, transitions, nil
}
