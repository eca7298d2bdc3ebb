package pgstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// controlRule is how one ControlOp treats each state: change lists the
// states its statement moves, noop the states it leaves as they are.
type controlRule struct {
	sql    string
	notify bool
	change []store.State
	noop   []store.State
}

func (s *Store) controlRule(op store.ControlOp) (controlRule, bool) {
	switch op {
	case store.OpCancel:
		return controlRule{sql: s.q.cancel,
			change: []store.State{store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateRunning},
			noop:   []store.State{store.StateCancelled}}, true
	case store.OpPause:
		return controlRule{sql: s.q.pause,
			change: []store.State{store.StateScheduled, store.StateRetrying},
			noop:   []store.State{store.StatePaused}}, true
	case store.OpResume:
		return controlRule{sql: s.q.resume, notify: true,
			change: []store.State{store.StatePaused},
			noop:   []store.State{store.StateScheduled, store.StateRetrying}}, true
	case store.OpRunNow:
		return controlRule{sql: s.q.runNow, notify: true,
			change: []store.State{store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateDead, store.StateCancelled}}, true
	}
	return controlRule{}, false
}

func contains(states []store.State, st store.State) bool {
	for _, s := range states {
		if s == st {
			return true
		}
	}
	return false
}

// Control applies op to the job with the given ID in one guarded statement,
// as store.Store requires. Resume and RunNow notify listeners. RunNow on a
// cancelled job whose unique key another live job has taken since returns
// an error wrapping store.ErrWrongState.
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
	for range maxInsertRetries {
		args := []any{id}
		if rule.notify {
			args = append(args, s.channel)
		}
		rows, _ := s.pool.Query(ctx, rule.sql, args...)
		jobs, err := collectJobs(rows)
		switch {
		case isUniqueViolation(err):
			return nil, fmt.Errorf("pgstore: %s job %s: another live job holds its unique key: %w", op, id, store.ErrWrongState)
		case err != nil:
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, err)
		case len(jobs) == 1:
			return jobs[0], nil
		}
		rows, _ = s.pool.Query(ctx, s.q.get, id)
		jobs, err = collectJobs(rows)
		switch {
		case err != nil:
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, err)
		case len(jobs) == 0:
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, store.ErrNotFound)
		case contains(rule.noop, jobs[0].State):
			return jobs[0], nil
		case !contains(rule.change, jobs[0].State):
			return nil, fmt.Errorf("pgstore: %s job %s in state %s: %w", op, id, jobs[0].State, store.ErrWrongState)
		}
	}
	return nil, fmt.Errorf("pgstore: %s job %s: job kept changing", op, id)
}
