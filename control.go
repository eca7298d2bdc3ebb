package ax

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// JobRecord is a job as the store keeps it; see store.JobRecord.
type JobRecord = store.JobRecord

// State is a job's state; see store.State for the state machine.
type State = store.State

// The job states, re-exported from package store.
const (
	StateScheduled = store.StateScheduled
	StateRunning   = store.StateRunning
	StateRetrying  = store.StateRetrying
	StatePaused    = store.StatePaused
	StateSucceeded = store.StateSucceeded
	StateDead      = store.StateDead
	StateCancelled = store.StateCancelled
)

// Get returns the job with id, or an error wrapping ErrNotFound.
func (s *Scheduler) Get(ctx context.Context, id uuid.UUID) (*JobRecord, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	if s.closed() {
		return nil, fmt.Errorf("get job %s: %w", id, ErrSchedulerClosed)
	}
	rec, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	openRecords(s.cfg.Keys, true, rec) // reencrypt.go
	return rec, nil
}

// Cancel cancels a job. A scheduled, retrying or paused job becomes
// cancelled at once. A running job is asked to stop: its handler's context
// is cancelled with cause ErrJobCancelled (at once on this host, at the next
// heartbeat on another) and the attempt ends as cancelled unless the handler
// succeeds first. Cancelling a cancelled job does nothing; a succeeded or
// dead job returns ErrWrongState. The job as it is afterwards is returned.
func (s *Scheduler) Cancel(ctx context.Context, id uuid.UUID) (*JobRecord, error) {
	rec, err := s.control(ctx, id, store.OpCancel)
	if err == nil && rec.State == StateRunning {
		s.mu.Lock()
		run := s.run
		s.mu.Unlock()
		if run != nil {
			run.cancelLocal(id, ErrJobCancelled)
		}
	}
	return rec, err
}

// Pause holds a job: it is not run until Resume or RunNow. A scheduled or
// retrying job is paused at once. A running job is never interrupted: the
// pause is recorded (JobRecord.PauseRequested), the attempt runs to its
// end, and then the job is paused instead of being retried or
// rescheduled; a success still ends succeeded, and a job with no attempts
// left still ends dead. Pausing a paused job does nothing; a succeeded,
// dead or cancelled job returns ErrWrongState.
func (s *Scheduler) Pause(ctx context.Context, id uuid.UUID) (*JobRecord, error) {
	return s.control(ctx, id, store.OpPause)
}

// Resume makes a paused job scheduled again, keeping its run time (so an
// overdue job runs at once). For a running job it withdraws a pause
// requested meanwhile. Resuming a scheduled or retrying job does nothing;
// other states return ErrWrongState.
func (s *Scheduler) Resume(ctx context.Context, id uuid.UUID) (*JobRecord, error) {
	return s.control(ctx, id, store.OpResume)
}

// RunNow makes a scheduled, retrying or paused job due at once. A dead or
// cancelled job is scheduled again, its error history kept: this is how a
// dead letter is retried by hand. Attempt numbers go on from the last one
// (a job that died at attempt 20 runs attempt 21, so logs, errors and the
// handler's Job.Attempt never show two attempts 1), and a job that used
// all its attempts is allowed one more (its MaxAttempts becomes
// Attempt+1). Running and succeeded jobs return ErrWrongState.
func (s *Scheduler) RunNow(ctx context.Context, id uuid.UUID) (*JobRecord, error) {
	return s.control(ctx, id, store.OpRunNow)
}

func (s *Scheduler) control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*JobRecord, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	if s.closed() {
		return nil, fmt.Errorf("%s job %s: %w", op, id, ErrSchedulerClosed)
	}
	rec, err := s.store.Control(ctx, id, op)
	if err != nil {
		return nil, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	s.log.Info("job "+op.String(), zap.Stringer(fieldJobID, id), zap.String(fieldKind, rec.Kind), zap.String("state", string(rec.State)))
	openRecords(s.cfg.Keys, true, rec) // reencrypt.go
	return rec, nil
}
