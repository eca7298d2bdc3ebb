package memstore

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
)

// ExtendLeases sets the expiry of every lease still held (job running under
// that token) to the store's now + params.Duration, in one operation. A
// lease is reported in Lost when its job is not found, not running, or runs
// under another token; held leases whose job has a cancel requested are
// reported in CancelRequested. A lease past its expiry is still held until
// RescueExpired takes it back. A nil params or a Duration <= 0 fails with an
// error wrapping store.ErrInvalidParams.
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
// documents. ok[i] is false, and nothing changed for that row, when
// params[i].Lease is no longer held. Applied rows leave running (LeaseToken
// and LeaseExpiresAt cleared, Owner kept) for:
//
//   - OutcomeSucceeded: succeeded, FinishedAt = now.
//   - OutcomeRetry: retrying, run_at = now + Delay.
//   - OutcomeDead: dead, FinishedAt = now.
//   - OutcomeSnooze: scheduled, run_at = now + Delay, Attempt - 1.
//   - OutcomeRelease: scheduled, run_at = now, Attempt - 1.
//   - OutcomeCancelled: cancelled, FinishedAt = now, unique key released.
//
// Retry, snooze and release of a job whose cancel was requested become
// cancelled. Retry, dead and cancelled outcomes append
// AttemptError{Attempt, now, Error} to the job's errors. A row with an
// unknown outcome or a negative Delay fails the whole call with an error
// wrapping store.ErrInvalidParams. Subscribers are notified of jobs made
// retrying or scheduled.
func (s *Store) Finish(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	for i := range params {
		p := &params[i]
		if p.Outcome < store.OutcomeSucceeded || p.Outcome > store.OutcomeCancelled {
			return nil, fmt.Errorf("finish jobs: row %d: %w: unknown outcome %s", i, store.ErrInvalidParams, p.Outcome)
		}
		if p.Delay < 0 {
			return nil, fmt.Errorf("finish jobs: row %d: %w: negative delay %s", i, store.ErrInvalidParams, p.Delay)
		}
	}
	ok := make([]bool, len(params))
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
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
		switch out {
		case store.OutcomeRetry, store.OutcomeDead, store.OutcomeCancelled:
			r.Errors = append(r.Errors, store.AttemptError{Attempt: r.Attempt, At: now, Error: p.Error})
		}
		if r.CancelRequested && (out == store.OutcomeRetry || out == store.OutcomeSnooze || out == store.OutcomeRelease) {
			out = store.OutcomeCancelled
		}
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
			s.releaseKey(j)
		}
		s.index(j)
		if notify && r.State.Claimable() {
			ns.add(r.Kind, r.RunAt)
		}
	}
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return ok, nil
}
