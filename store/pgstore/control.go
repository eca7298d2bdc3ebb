package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// controlRule is how one ControlOp treats a job: sql makes the change;
// when it matches no row, the job as read afterwards tells why: noop
// reports the jobs the op leaves as they are (the op succeeds), change the
// jobs sql would have changed (the job changed in between: try again), and
// any other job is in the wrong state.
type controlRule struct {
	sql    string
	notify bool
	change func(j *store.JobRecord) bool
	noop   func(j *store.JobRecord) bool
}

// in returns a predicate matching jobs in one of states.
func in(states ...store.State) func(j *store.JobRecord) bool {
	return func(j *store.JobRecord) bool { return slices.Contains(states, j.State) }
}

// running returns a predicate matching running jobs whose pause was
// requested (pauseRequested true) or not.
func running(pauseRequested bool) func(j *store.JobRecord) bool {
	return func(j *store.JobRecord) bool {
		return j.State == store.StateRunning && j.PauseRequested == pauseRequested
	}
}

// either returns a predicate matching the jobs a or b matches.
func either(a, b func(j *store.JobRecord) bool) func(j *store.JobRecord) bool {
	return func(j *store.JobRecord) bool { return a(j) || b(j) }
}

func (s *Store) controlRule(op store.ControlOp) (controlRule, bool) {
	none := func(*store.JobRecord) bool { return false }
	switch op {
	case store.OpCancel:
		return controlRule{sql: s.q.cancel,
			change: in(store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateRunning),
			noop:   in(store.StateCancelled)}, true
	case store.OpPause:
		return controlRule{sql: s.q.pause,
			change: either(in(store.StateScheduled, store.StateRetrying), running(false)),
			noop:   either(in(store.StatePaused), running(true))}, true
	case store.OpResume:
		return controlRule{sql: s.q.resume, notify: true,
			change: either(in(store.StatePaused), running(true)),
			noop:   either(in(store.StateScheduled, store.StateRetrying), running(false))}, true
	case store.OpRunNow:
		return controlRule{sql: s.q.runNow, notify: true,
			change: in(store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateDead, store.StateCancelled),
			noop:   none}, true
	}
	return controlRule{}, false
}

// Control applies op to the job with the given ID in one guarded statement,
// as store.Store requires. A finished job in the history that op changes
// is first moved back to jobs (history.go). Pausing a running job sets its
// pause_requested, which the end of its attempt acts on (see Finish and
// RescueExpired);
// resuming it withdraws the request. Resume of a paused job and RunNow
// notify listeners. RunNow of a dead or cancelled job makes it live, so it
// takes its unique key back (jobs_unique_scope_idx holds live jobs' keys):
// when the job gave the key up on ending (cancelled, or dead in a scope
// that frees finished jobs' keys) and another job holds it since, the
// index refuses the update and Control returns an error wrapping
// store.ErrWrongState, changing nothing.
func (s *Store) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*store.JobRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rule, ok := s.controlRule(op)
	if !ok {
		return nil, fmt.Errorf("pgstore: control job %s: unknown operation %s: %w", id, op, store.ErrInvalidParams)
	}
	// The statement is guarded by the states it leaves. When it matches
	// nothing, the job's state tells why; a state the statement would have
	// moved means the job changed between the two, so try again.
	restored, finalSeen := false, false
	for range maxInsertRetries {
		args := []any{[16]byte(id)}
		if rule.notify {
			args = append(args, s.channel)
		}
		rows, _ := s.pool.Query(ctx, rule.sql, args...)
		jobs, err := collectJobs(rows)
		switch {
		case isUniqueViolation(err):
			if restored {
				// Back where it was: left in jobs with its old
				// finished_at, it would be behind every later archive
				// pass's starting point. Should that fail (a Prune
				// dropped its day since), it stays in jobs, where
				// reads see it the same and Prune reaches it.
				_, _ = s.pool.Exec(ctx, s.sql(returnSQL), [][16]byte{id})
			}
			return nil, fmt.Errorf("pgstore: %s job %s: another job holds its unique key: %w", op, id, store.ErrWrongState)
		case err != nil:
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, err)
		case len(jobs) == 1:
			if j := jobs[0]; j.State == store.StateScheduled || j.State == store.StateRetrying {
				// A resumed job keeps its run_at, likely below the claim
				// cursors: a claim right after this returns must see it
				// without waiting for the notification (cursor.go).
				s.cursors.lower(j.Kind, j.RunAt)
			}
			return jobs[0], nil
		}
		rows, _ = s.pool.Query(ctx, s.q.get, [16]byte(id))
		jobs, err = collectJobs(rows)
		switch {
		case err != nil:
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, err)
		case len(jobs) == 0:
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, store.ErrNotFound)
		case rule.noop(jobs[0]):
			return jobs[0], nil
		case !rule.change(jobs[0]):
			return nil, fmt.Errorf("pgstore: %s job %s in state %s: %w", op, id, jobs[0].State, store.ErrWrongState)
		case jobs[0].State.Final() && finalSeen:
			// In jobs (restored or there) and still not changed: the
			// statement's guard found its key held by a job in the
			// history (heldInHistorySQL).
			if restored {
				_, _ = s.pool.Exec(ctx, s.sql(returnSQL), [][16]byte{id}) // as for a key held in jobs
			}
			return nil, fmt.Errorf("pgstore: %s job %s: a job in the history holds its unique key: %w", op, id, store.ErrWrongState)
		case jobs[0].State.Final():
			finalSeen = true
			// A finished job the op changes (run-now) may be in the
			// history, which the statement does not reach: move it back
			// first (a no-op when it is in jobs).
			tag, err := s.pool.Exec(ctx, s.sql(restoreSQL("$1::uuid[]")), [][16]byte{id})
			switch {
			case isUniqueViolation(err):
				return nil, fmt.Errorf("pgstore: %s job %s: another job holds its unique key: %w", op, id, store.ErrWrongState)
			case err != nil:
				return nil, fmt.Errorf("pgstore: %s job %s: restore from history: %w", op, id, err)
			}
			restored = restored || tag.RowsAffected() > 0
		}
	}
	return nil, fmt.Errorf("pgstore: %s job %s: job kept changing", op, id)
}
