package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// Control applies a user's operation to one job, in one transaction, and
// returns the job afterwards. The transitions are exactly those documented
// on store.OpCancel, store.OpPause, store.OpResume and store.OpRunNow:
//
//   - OpCancel: scheduled, retrying, paused → cancelled (FinishedAt = now,
//     unique key released, follow-ups and batch set off); running →
//     CancelRequested; cancelled → no change.
//   - OpPause: scheduled, retrying → paused; paused → no change; running →
//     PauseRequested (the attempt runs on).
//   - OpResume: paused → scheduled, run_at kept; running → PauseRequested
//     withdrawn; scheduled, retrying → no change.
//   - OpRunNow: scheduled, retrying, paused → scheduled, run_at = now; dead,
//     cancelled → scheduled, run_at = now, FinishedAt cleared, errors and
//     Attempt kept, MaxAttempts raised to Attempt+1 if it was lower. A job that gave up its unique key on ending (cancelled,
//     or dead in a scope that frees finished jobs' keys) takes it back, and
//     fails with store.ErrWrongState if another job holds it meanwhile.
//
// Any other state fails with an error wrapping store.ErrWrongState, an
// unknown ID with store.ErrNotFound, an unknown op with
// store.ErrInvalidParams; nothing is changed then. Subscribers are notified
// when resume or run-now makes a job claimable.
func (s *Store) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*store.JobRecord, error) {
	if op < store.OpCancel || op > store.OpRunNow {
		return nil, fmt.Errorf("%s job %s: %w: unknown operation", op, id, store.ErrInvalidParams)
	}
	var rec *store.JobRecord
	err := s.write(ctx, func(w *wtx) error {
		j, err := w.loadOne(qLoadID, id[:])
		if err != nil {
			return err
		}
		if j == nil {
			return store.ErrNotFound
		}
		if _, err := w.control(j, op); err != nil {
			return fmt.Errorf("(%s): %w", j.rec.State, err)
		}
		full, err := scanJob(w.queryRow(qGetSeq, j.seq))
		if err != nil {
			return err
		}
		rec, err = full.record()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	return rec, nil
}

// errKeyHeld is returned by control when a reopened job's unique key is
// held by another job.
var errKeyHeld = errors.New("its unique key is held by another job")

// control makes op's transition on j, saves it and reports whether j
// changed. A cancel that ends j sets off its follow-ups and batch; a
// run-now that reopens a final job undoes its batch bookkeeping.
func (w *wtx) control(j *jobRow, op store.ControlOp) (changed bool, err error) {
	r := &j.rec
	st := r.State
	switch op {
	case store.OpCancel:
		switch {
		case st == store.StateCancelled:
			return false, nil
		case st == store.StateRunning:
			if r.CancelRequested {
				return false, nil
			}
			r.CancelRequested = true
			return true, w.save(j)
		case st.Claimable() || st == store.StatePaused:
			r.State, r.FinishedAt = store.StateCancelled, w.now
			if err := w.save(j); err != nil {
				return false, err
			}
			return true, w.finalized(j)
		}
	case store.OpPause:
		switch {
		case st == store.StatePaused:
			return false, nil
		case st == store.StateRunning:
			// Never interrupt the attempt: record the request, which
			// decides where the attempt's end takes the job.
			if r.PauseRequested {
				return false, nil
			}
			r.PauseRequested = true
			return true, w.save(j)
		case st.Claimable():
			r.State = store.StatePaused
			return true, w.save(j)
		}
	case store.OpResume:
		switch {
		case st.Claimable():
			return false, nil
		case st == store.StateRunning:
			if !r.PauseRequested {
				return false, nil
			}
			r.PauseRequested = false
			return true, w.save(j)
		case st == store.StatePaused:
			r.State = store.StateScheduled
			if err := w.save(j); err != nil {
				return false, err
			}
			w.notify(r.Kind, r.RunAt)
			return true, nil
		}
	case store.OpRunNow:
		switch {
		case st.Claimable() || st == store.StatePaused:
			r.State, r.RunAt = store.StateScheduled, w.now
			if err := w.save(j); err != nil {
				return false, err
			}
			w.notify(r.Kind, r.RunAt)
			return true, nil
		case st == store.StateDead || st == store.StateCancelled:
			r.State, r.RunAt = store.StateScheduled, w.now
			r.MaxAttempts = max(r.MaxAttempts, r.Attempt+1) // one more attempt, numbered on
			r.FinishedAt = zeroTime
			if err := w.save(j); err != nil {
				if isConstraint(err) {
					return false, fmt.Errorf("%w: %w", store.ErrWrongState, errKeyHeld)
				}
				return false, err
			}
			if err := w.reopened(j, st); err != nil {
				return false, err
			}
			w.notify(r.Kind, r.RunAt)
			return true, nil
		}
	}
	return false, store.ErrWrongState
}

// isKeyHeld reports whether err is control's refusal to reopen a job whose
// unique key another job holds.
func isKeyHeld(err error) bool { return errors.Is(err, errKeyHeld) }
