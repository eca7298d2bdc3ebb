package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// zeroTime is the zero time.Time, which the record uses for "not set".
var zeroTime time.Time

// RescueExpired takes back, in one transaction, at most limit running jobs
// whose lease expired before the store's now, earliest expiry first: to
// retrying, due now, when Attempt < MaxAttempts, otherwise to dead
// (FinishedAt = now); a job whose cancel was requested goes to cancelled,
// and one whose pause was requested to paused (due now) while attempts
// remain. Each gets an AttemptError "lease expired (owner X)" and loses its
// lease. It returns the jobs it rescued, earliest expiry first. A limit < 1
// fails with an error wrapping store.ErrInvalidParams. The expired leases
// are read from the jobs_lease index: O(rescued · log n).
func (s *Store) RescueExpired(ctx context.Context, limit int) ([]store.Rescued, error) {
	if limit < 1 {
		return nil, fmt.Errorf("rescue expired leases: %w: limit %d < 1", store.ErrInvalidParams, limit)
	}
	var rescued []store.Rescued
	err := s.write(ctx, func(w *wtx) error {
		rescued = rescued[:0]
		js, err := loadAll(w.query(qRescueSelect, toUS(w.now), limit))
		if err != nil {
			return err
		}
		done := make([]ended, 0, len(js))
		for _, j := range js {
			r := &j.rec
			if err := j.appendError(w.now, fmt.Sprintf("lease expired (owner %s)", r.Owner)); err != nil {
				return err
			}
			cancelRequested, pauseRequested := r.CancelRequested, r.PauseRequested
			if err := w.leftRunning(j); err != nil {
				return err
			}
			j.leaveRunning()
			switch {
			case cancelRequested:
				// The user asked to cancel; a dead owner must not undo that.
				r.State, r.FinishedAt = store.StateCancelled, w.now
			case r.Attempt < r.MaxAttempts && pauseRequested:
				r.State, r.RunAt = store.StatePaused, w.now
			case r.Attempt < r.MaxAttempts:
				r.State, r.RunAt = store.StateRetrying, w.now
			default:
				r.State, r.FinishedAt = store.StateDead, w.now
			}
			if r.State.Claimable() {
				w.notify(r.Kind, r.RunAt)
			}
			if r.State.Final() {
				if err := w.finalized(j); err != nil {
					return err
				}
			}
			rescued = append(rescued, store.Rescued{ID: r.ID, Kind: r.Kind, Owner: r.Owner, Attempt: r.Attempt, State: r.State})
			done = append(done, ended{j: j})
		}
		return w.saveEnded(done)
	})
	if err != nil {
		return nil, fmt.Errorf("rescue expired leases: %w", err)
	}
	return rescued, nil
}

// Prune deletes, in one statement, up to params.Limit final jobs
// (succeeded, dead, cancelled) whose FinishedAt is more than
// params.Retention before the store's now, oldest first, which frees the
// unique keys they held, and returns how many it deleted. A nil params, a
// Limit < 1 or a negative Retention fails with an error wrapping
// store.ErrInvalidParams. Batches keep their counts of pruned children.
// Deleted rows' pages are reused by later inserts; the file does not
// shrink (run VACUUM offline for that).
func (s *Store) Prune(ctx context.Context, params *store.PruneParams) (int, error) {
	switch {
	case params == nil:
		return 0, fmt.Errorf("prune jobs: %w: nil params", store.ErrInvalidParams)
	case params.Limit < 1:
		return 0, fmt.Errorf("prune jobs: %w: limit %d < 1", store.ErrInvalidParams, params.Limit)
	case params.Retention < 0:
		return 0, fmt.Errorf("prune jobs: %w: negative retention %s", store.ErrInvalidParams, params.Retention)
	}
	var n int64
	err := s.write(ctx, func(w *wtx) error {
		res, err := w.exec(qPrune, toUS(w.now.Add(-params.Retention)), params.Limit)
		if err != nil {
			return err
		}
		// The closed breakers of partitions with no job left
		// (store.PartitionBreakerStore).
		if _, err := w.exec(qPartBreakersPrune); err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune jobs: %w", err)
	}
	return int(n), nil
}
