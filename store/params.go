package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// MaxPayloadSize is the largest payload, in bytes, a Store accepts. Larger
// payloads belong in blob storage, with a reference in the job.
const MaxPayloadSize = 1 << 20

// MaxKindLength is the longest job kind, in bytes.
const MaxKindLength = 255

// InsertParams describes one job to insert.
type InsertParams struct {
	// ID must be set by the caller (a UUIDv7).
	ID uuid.UUID
	// Kind must be non-empty and at most MaxKindLength bytes.
	Kind string
	// Payload must be valid JSON, at most MaxPayloadSize bytes. Nil is
	// stored as the JSON value null.
	Payload []byte
	// Metadata is optional.
	Metadata map[string]string
	// Priority must be PriorityHigh, PriorityNormal or PriorityLow.
	Priority int
	// RunAt, when not zero, is the absolute time the job becomes due.
	RunAt time.Time
	// Delay, used when RunAt is zero, makes the job due Delay after the
	// store's now. It must not be negative.
	Delay time.Duration
	// MaxAttempts must be at least 1.
	MaxAttempts int
	// UniqueKey, when not empty, makes the insert a no-op returning the
	// existing job's ID if a job that is not cancelled holds the same key.
	UniqueKey string
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
// Stores call it for every row before writing any.
func (p *InsertParams) Validate() error {
	switch {
	case p.ID == uuid.Nil:
		return fmt.Errorf("%w: job ID is not set", ErrInvalidParams)
	case p.Kind == "":
		return fmt.Errorf("%w: empty kind", ErrInvalidParams)
	case len(p.Kind) > MaxKindLength:
		return fmt.Errorf("%w: kind is %d bytes, more than %d", ErrInvalidParams, len(p.Kind), MaxKindLength)
	case len(p.Payload) > MaxPayloadSize:
		return fmt.Errorf("%w: payload is %d bytes, more than %d", ErrInvalidParams, len(p.Payload), MaxPayloadSize)
	case p.Payload != nil && !json.Valid(p.Payload):
		return fmt.Errorf("%w: payload is not valid JSON", ErrInvalidParams)
	case p.Priority < PriorityHigh || p.Priority > PriorityLow:
		return fmt.Errorf("%w: priority %d out of range [%d, %d]", ErrInvalidParams, p.Priority, PriorityHigh, PriorityLow)
	case p.Delay < 0:
		return fmt.Errorf("%w: negative delay %s", ErrInvalidParams, p.Delay)
	case p.MaxAttempts < 1:
		return fmt.Errorf("%w: max attempts %d < 1", ErrInvalidParams, p.MaxAttempts)
	}
	return nil
}

// InsertResult reports what one InsertParams produced.
type InsertResult struct {
	// ID is the inserted job's ID or, for a duplicate, the existing one's.
	ID uuid.UUID
	// Duplicate is true when the unique key was already held and nothing
	// was inserted.
	Duplicate bool
}

// KindLimit bounds how many jobs of one kind a claim may take.
type KindLimit struct {
	Kind  string
	Limit int
}

// ClaimParams asks for due jobs.
type ClaimParams struct {
	// Owner names the claiming node; stored on each claimed job.
	Owner string
	// Kinds lists the kinds to claim, each with its own limit (> 0).
	Kinds []KindLimit
	// Limit caps the total number of jobs claimed (> 0).
	Limit int
	// LeaseDuration is how long the claimed leases last (> 0) before
	// RescueExpired may take the jobs back.
	LeaseDuration time.Duration
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *ClaimParams) Validate() error {
	if p.Limit < 1 {
		return fmt.Errorf("%w: claim limit %d < 1", ErrInvalidParams, p.Limit)
	}
	if p.LeaseDuration <= 0 {
		return fmt.Errorf("%w: lease duration %s <= 0", ErrInvalidParams, p.LeaseDuration)
	}
	for _, k := range p.Kinds {
		if k.Kind == "" || k.Limit < 1 {
			return fmt.Errorf("%w: kind limit %q=%d", ErrInvalidParams, k.Kind, k.Limit)
		}
	}
	return nil
}

// ClaimResult is what a claim took and what it learned.
type ClaimResult struct {
	// Jobs are the claimed jobs, now running under fresh lease tokens, in
	// claim order (priority, then run_at).
	Jobs []*JobRecord
	// Now is the store's clock at the claim.
	Now time.Time
	// NextRunAt is the earliest run_at among the claimable jobs of the
	// requested kinds that this claim left behind, or zero when there are
	// none. It is at or before Now when due jobs remain (the limit was hit).
	NextRunAt time.Time
}

// ExtendParams asks to extend running leases.
type ExtendParams struct {
	Leases []Lease
	// Duration is the new lease length, from the store's now (> 0).
	Duration time.Duration
}

// ExtendResult reports leases that could not be extended and cancellations
// requested for the rest.
type ExtendResult struct {
	// Lost lists the jobs whose lease the caller no longer holds (token
	// changed, job rescued, finished or pruned). Their handlers must stop;
	// their results will be refused.
	Lost []uuid.UUID
	// CancelRequested lists the still-held jobs a user asked to cancel.
	CancelRequested []uuid.UUID
}

// Outcome is how an attempt ended.
type Outcome int

// Outcomes of an attempt, as written by Finish.
const (
	// OutcomeSucceeded moves the job to succeeded.
	OutcomeSucceeded Outcome = iota + 1
	// OutcomeRetry moves the job to retrying, due Delay after now, and
	// records Error.
	OutcomeRetry
	// OutcomeDead moves the job to dead and records Error.
	OutcomeDead
	// OutcomeSnooze moves the job to scheduled, due Delay after now, and
	// gives the attempt back (attempt - 1).
	OutcomeSnooze
	// OutcomeRelease hands a job back unfinished (graceful stop): scheduled,
	// due now, attempt given back.
	OutcomeRelease
	// OutcomeCancelled moves the job to cancelled and records Error.
	OutcomeCancelled
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeRetry:
		return "retry"
	case OutcomeDead:
		return "dead"
	case OutcomeSnooze:
		return "snooze"
	case OutcomeRelease:
		return "release"
	case OutcomeCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// FinishParams records the end of one attempt.
type FinishParams struct {
	// Lease must match the job's current lease; otherwise nothing changes.
	Lease   Lease
	Outcome Outcome
	// Delay is used by OutcomeRetry and OutcomeSnooze (>= 0).
	Delay time.Duration
	// Error is recorded in the job's Errors for retry, dead and cancelled.
	Error string
}

// ControlOp is a user's request on one job.
type ControlOp int

// Control operations.
const (
	// OpCancel: scheduled, retrying, paused → cancelled. Running → cancel
	// requested (the owner cancels the handler at its next heartbeat).
	// Cancelled → no change. Succeeded, dead → ErrWrongState.
	OpCancel ControlOp = iota + 1
	// OpPause: scheduled, retrying → paused. Paused → no change. Others →
	// ErrWrongState (a running attempt is never interrupted by a pause).
	OpPause
	// OpResume: paused → scheduled, run_at kept. Scheduled, retrying → no
	// change. Others → ErrWrongState.
	OpResume
	// OpRunNow: scheduled, retrying, paused → scheduled with run_at = now.
	// Dead, cancelled → scheduled with run_at = now and attempt reset to 0
	// (errors kept). Running, succeeded → ErrWrongState.
	OpRunNow
)

// String returns the operation's name.
func (op ControlOp) String() string {
	switch op {
	case OpCancel:
		return "cancel"
	case OpPause:
		return "pause"
	case OpResume:
		return "resume"
	case OpRunNow:
		return "run-now"
	}
	return fmt.Sprintf("ControlOp(%d)", int(op))
}
