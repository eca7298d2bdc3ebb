package memstore

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
)

// RescueExpired takes back at most limit running jobs whose lease expired
// before the store's now, earliest expiry first: to retrying, due now, when
// Attempt < MaxAttempts, otherwise to dead (FinishedAt = now); a job whose
// cancel was requested goes to cancelled, and one whose pause was requested
// to paused (due now) while attempts remain. Each gets an AttemptError
// "lease expired (owner X)" and loses its lease token. It returns the jobs
// it rescued, earliest expiry first, each with the owner and attempt its
// lease was cut short on and the state it went to. A limit < 1 fails with
// an error wrapping store.ErrInvalidParams. Subscribers are notified of
// jobs made retrying.
func (s *Store) RescueExpired(ctx context.Context, limit int) ([]store.Rescued, error) {
	if limit < 1 {
		return nil, fmt.Errorf("rescue expired leases: %w: limit %d < 1", store.ErrInvalidParams, limit)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("rescue expired leases: %w", err)
	}
	now := s.clock()
	var ns notes
	notify := s.subs.any()
	var rescued []store.Rescued
	for len(rescued) < limit {
		j := s.leases.top()
		if j == nil || !j.rec.LeaseExpiresAt.Before(now) {
			break
		}
		s.unindex(j)
		r := &j.rec
		r.Errors = append(r.Errors, store.AttemptError{
			Attempt:   r.Attempt,
			At:        now,
			Error:     fmt.Sprintf("lease expired (owner %s)", r.Owner),
			Node:      r.Owner,
			StartedAt: r.AttemptedAt,
		})
		cancelRequested, pauseRequested := r.CancelRequested, r.PauseRequested
		leaveRunning(r)
		switch {
		case cancelRequested:
			// The user asked to cancel; a dead owner must not undo that.
			r.State, r.FinishedAt = store.StateCancelled, now
		case r.Attempt < r.MaxAttempts && pauseRequested:
			// Likewise a pause: the job waits for a resume, not for a
			// claimer.
			r.State, r.RunAt = store.StatePaused, now
		case r.Attempt < r.MaxAttempts:
			r.State, r.RunAt = store.StateRetrying, now
			if notify {
				ns.add(r.Kind, now)
			}
		default:
			r.State, r.FinishedAt = store.StateDead, now
		}
		s.index(j)
		if r.State.Final() {
			s.finalized(j, now, &ns)
		}
		rescued = append(rescued, store.Rescued{ID: r.ID, Kind: r.Kind, Owner: r.Owner, Attempt: r.Attempt, State: r.State})
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return rescued, nil
}

// Prune deletes up to params.Limit final jobs (succeeded, dead, cancelled)
// whose FinishedAt is more than params.Retention before the store's now,
// oldest first, frees the unique keys they held, and returns how many it
// deleted. It also forgets the partitions' rate buckets that are full,
// and the closed breakers of partitions with no claimable or running job
// (store.PartitionBreakerStore). A nil params, a Limit < 1 or a negative Retention fails with an
// error wrapping store.ErrInvalidParams.
func (s *Store) Prune(ctx context.Context, params *store.PruneParams) (int, error) {
	switch {
	case params == nil:
		return 0, fmt.Errorf("prune jobs: %w: nil params", store.ErrInvalidParams)
	case params.Limit < 1:
		return 0, fmt.Errorf("prune jobs: %w: limit %d < 1", store.ErrInvalidParams, params.Limit)
	case params.Retention < 0:
		return 0, fmt.Errorf("prune jobs: %w: negative retention %s", store.ErrInvalidParams, params.Retention)
	}
	if err := s.lock(ctx); err != nil {
		return 0, fmt.Errorf("prune jobs: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	for kind, f := range s.flows {
		for key, tat := range f.partTAT {
			if !tat.After(now) { // a full bucket: the same as none
				delete(f.partTAT, key)
			}
		}
		s.forgetIdlePartBreakers(kind, f)
	}
	cutoff := now.Add(-params.Retention)
	n := 0
	for ; n < params.Limit; n++ {
		j := s.finished.top()
		if j == nil || !j.rec.FinishedAt.Before(cutoff) {
			break
		}
		s.unindex(j)
		delete(s.jobs, j.rec.ID)
		s.ids.removed++
	}
	return n, nil
}
