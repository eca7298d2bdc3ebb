package memstore

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Control applies a user's operation to one job and returns a copy of the
// job afterwards. The transitions are exactly those documented on
// store.OpCancel, store.OpPause, store.OpResume and store.OpRunNow:
//
//   - OpCancel: scheduled, retrying, paused → cancelled (FinishedAt = now,
//     unique key freed); running → CancelRequested; cancelled → no change.
//   - OpPause: scheduled, retrying → paused; paused → no change; running →
//     PauseRequested (the attempt runs on; Finish or RescueExpired pauses
//     the job when the attempt ends in a way that would reschedule it).
//   - OpResume: paused → scheduled, run_at kept; running → PauseRequested
//     withdrawn; scheduled, retrying → no change.
//   - OpRunNow: scheduled, retrying, paused → scheduled, run_at = now; dead,
//     cancelled → scheduled, run_at = now, FinishedAt cleared, errors and
//     Attempt kept, MaxAttempts raised to Attempt+1 if it was lower. A cancelled job takes its unique key back, and fails with
//     store.ErrWrongState if another job that is not cancelled holds it.
//
// A dead job reopened by OpRunNow takes its unique key back too, when its
// scope freed the key as the job ended (the default), and likewise fails
// with store.ErrWrongState if another job holds the key meanwhile.
//
// Any other state fails with an error wrapping store.ErrWrongState, an
// unknown ID with store.ErrNotFound, an unknown op with
// store.ErrInvalidParams; nothing is changed then. Subscribers are notified
// when resume or run-now makes a job claimable.
func (s *Store) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*store.JobRecord, error) {
	if op < store.OpCancel || op > store.OpRunNow {
		return nil, fmt.Errorf("%s job %s: %w: unknown operation", op, id, store.ErrInvalidParams)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	j := s.jobs[id]
	if j == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s job %s: %w", op, id, store.ErrNotFound)
	}
	var ns notes
	changed, err := s.control(j, op, &ns)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s job %s (%s): %w", op, id, j.rec.State, err)
	}
	r := copyRecord(&j.rec)
	if changed && r.State.Claimable() && s.subs.any() {
		ns.add(r.Kind, r.RunAt)
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return r, nil
}

// control makes op's transition on j and reports whether j changed. A
// cancel that ends j sets off its follow-ups and batch (finalized), a
// run-now that reopens a final job undoes its batch bookkeeping; jobs they
// insert are noted in ns.
func (s *Store) control(j *job, op store.ControlOp, ns *notes) (changed bool, err error) {
	r := &j.rec
	st := r.State
	switch op {
	case store.OpCancel:
		switch {
		case st == store.StateCancelled:
			return false, nil
		case st == store.StateRunning:
			changed = !r.CancelRequested
			r.CancelRequested = true
			return changed, nil
		case st.Claimable() || st == store.StatePaused:
			s.unindex(j)
			now := s.clock()
			r.State, r.FinishedAt = store.StateCancelled, now
			s.index(j)
			s.finalized(j, now, ns)
			return true, nil
		}
	case store.OpPause:
		switch {
		case st == store.StatePaused:
			return false, nil
		case st == store.StateRunning:
			// Never interrupt the attempt: record the request, which
			// decides where the attempt's end takes the job.
			changed = !r.PauseRequested
			r.PauseRequested = true
			return changed, nil
		case st.Claimable():
			s.unindex(j)
			r.State = store.StatePaused
			s.index(j)
			return true, nil
		}
	case store.OpResume:
		switch {
		case st.Claimable():
			return false, nil
		case st == store.StateRunning:
			changed = r.PauseRequested
			r.PauseRequested = false
			return changed, nil
		case st == store.StatePaused:
			s.unindex(j)
			r.State = store.StateScheduled
			s.index(j)
			return true, nil
		}
	case store.OpRunNow:
		switch {
		case st.Claimable() || st == store.StatePaused:
			s.unindex(j)
			r.State, r.RunAt = store.StateScheduled, s.clock()
			s.index(j)
			return true, nil
		case st == store.StateDead || st == store.StateCancelled:
			// Reopened, j holds its key again; if it gave the key up on
			// ending and another job took it since, j must stay final.
			if h := s.holder(j.ukey); j.hasKey && h != nil && h != j {
				return false, fmt.Errorf("%w: unique key %q is held by job %s", store.ErrWrongState, r.UniqueKey, h.rec.ID)
			}
			s.unindex(j)
			r.State, r.RunAt = store.StateScheduled, s.clock()
			r.MaxAttempts = max(r.MaxAttempts, r.Attempt+1) // one more attempt, numbered on
			r.FinishedAt = zeroTime
			s.index(j)
			s.reopened(j)
			return true, nil
		}
	}
	return false, store.ErrWrongState
}
