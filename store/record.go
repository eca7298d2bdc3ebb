package store

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Priority levels. Lower numbers are claimed first, strictly: no job of a
// lower level is claimed while a due job of a higher level waits.
const (
	PriorityHigh   = 1
	PriorityNormal = 2
	PriorityLow    = 3
)

// Priorities lists the valid priority levels in claim order.
var Priorities = []int{PriorityHigh, PriorityNormal, PriorityLow}

// JobRecord is a job as the store keeps it. A Store returns fresh copies;
// callers may keep and modify them freely.
type JobRecord struct {
	// ID is a UUIDv7 chosen by the inserter.
	ID uuid.UUID `json:"id"`
	// Kind selects the handler.
	Kind string `json:"kind"`
	// Payload is the handler's argument, as JSON.
	Payload json.RawMessage `json:"payload"`
	// Metadata is free-form string data carried with the job (trace
	// context, tenant, request id...). Nil when empty.
	Metadata map[string]string `json:"metadata,omitempty"`
	// State is the job's current state; see State for the machine.
	State State `json:"state"`
	// Priority is one of PriorityHigh, PriorityNormal, PriorityLow.
	Priority int `json:"priority"`
	// RunAt is the earliest time, in the store's clock, the job may start.
	// It moves with each retry, snooze, hand-back and RunNow.
	RunAt time.Time `json:"run_at"`
	// ScheduledAt is the run time the job was scheduled for: its RunAt when
	// it was inserted (store clock). It never changes afterwards, so it
	// stays the originally scheduled time across retries, snoozes,
	// hand-backs and RunNow. For a periodic job it is the tick.
	ScheduledAt time.Time `json:"scheduled_at,omitzero"`
	// Attempt counts the attempts started so far (a claim adds one; a
	// snooze or hand-back takes it back).
	Attempt int `json:"attempt"`
	// MaxAttempts is the number of attempts after which a failure is final.
	MaxAttempts int `json:"max_attempts"`
	// UniqueKey, when not empty, is the job's idempotency key, unique in
	// its Unique scope.
	UniqueKey string `json:"unique_key,omitempty"`
	// Unique is the scope of UniqueKey (zero without a key).
	Unique UniqueScope `json:"unique,omitzero"`
	// Errors holds one entry per failed attempt, oldest first.
	Errors []AttemptError `json:"errors,omitempty"`
	// LeaseToken fences the current attempt; zero unless running.
	LeaseToken uuid.UUID `json:"lease_token,omitzero"`
	// LeaseExpiresAt is when the current lease lapses (store clock); zero
	// unless running.
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
	// Owner names the node holding, or that last held, the job.
	Owner string `json:"owner,omitempty"`
	// CancelRequested is set when a running job was asked to cancel; its
	// owner learns of it at the next lease extension.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// PauseRequested is set when a running job was paused: its attempt
	// runs to its end, then the job becomes paused instead of being
	// retried or rescheduled (a success still ends succeeded). Cleared
	// when the attempt ends or by a resume.
	PauseRequested bool `json:"pause_requested,omitempty"`
	// Fence is the job's fencing token: every claim increments it, and
	// nothing else changes it, so it grows strictly with each attempt, even
	// across snoozes, hand-backs and RunNow (which give back or reset
	// Attempt). A handler passes it to its own downstream writes so that
	// a late write of an earlier attempt can be refused there. Zero until
	// the first claim.
	Fence int64 `json:"fence"`
	// CreatedAt is when the job was inserted (store clock).
	CreatedAt time.Time `json:"created_at"`
	// AttemptedAt is when the latest attempt was claimed (store clock).
	AttemptedAt time.Time `json:"attempted_at,omitzero"`
	// FinishedAt is when the job entered a final state; zero otherwise.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Result is what the job's handler recorded (JSON), if anything.
	Result json.RawMessage `json:"result,omitempty"`
	// FollowUps are the jobs this job inserts when it becomes final.
	FollowUps []FollowUp `json:"follow_ups,omitempty"`
	// Parent is the job whose finalization inserted this one (a
	// follow-up, or a batch's completion job: when several children end
	// in one call and so complete the batch, any one of them); zero
	// otherwise.
	Parent uuid.UUID `json:"parent,omitzero"`
	// Batch is the batch this job is a child of, or completes; zero
	// otherwise.
	Batch uuid.UUID `json:"batch,omitzero"`
	// PartitionKey is the job's partition under its kind's flow settings
	// (FlowConfig.Partition), derived by a FlowStore when the job was
	// inserted; empty otherwise.
	PartitionKey string `json:"partition_key,omitempty"`
	// SequenceKey is the job's sequence (InsertParams.SequenceKey).
	SequenceKey string `json:"sequence_key,omitempty"`
	// Snoozes counts the attempts that ended in a snooze (Finish with
	// OutcomeSnooze): a snooze gives its attempt back, so Attempt and
	// Errors do not show it.
	Snoozes int `json:"snoozes,omitempty"`
	// SnoozedAt is when the last of them was recorded (store clock);
	// zero when Snoozes is.
	SnoozedAt time.Time `json:"snoozed_at,omitzero"`
	// Brief is set only on the records of a listing in brief
	// (ListJobsParams.PreviewBytes): it holds the start and the size of
	// the payload and the result, which the record then leaves out; see
	// Brief. Nil on a whole record.
	Brief *Brief `json:"brief,omitempty"`
}

// AttemptError records one failed attempt.
type AttemptError struct {
	// Attempt is the attempt number that failed (1-based).
	Attempt int `json:"attempt"`
	// At is when the failure was recorded (store clock).
	At time.Time `json:"at"`
	// Error is the error text, with a stack trace for panics.
	Error string `json:"error"`
	// Node is the node that ran the attempt (the job's Owner when the
	// failure was recorded); empty in entries recorded before stores
	// kept it.
	Node string `json:"node,omitempty"`
	// StartedAt is when the attempt was claimed (the job's AttemptedAt
	// when the failure was recorded, store clock); zero in entries
	// recorded before stores kept it.
	StartedAt time.Time `json:"started_at,omitzero"`
}

// Lease identifies one attempt of a running job: the job ID and the token
// its claim stamped.
type Lease struct {
	ID    uuid.UUID `json:"id"`
	Token uuid.UUID `json:"token"`
}

// Rescued is one job RescueExpired took back from an owner whose lease
// expired.
type Rescued struct {
	// ID and Kind name the job.
	ID   uuid.UUID `json:"id"`
	Kind string    `json:"kind"`
	// Owner is the node whose lease expired.
	Owner string `json:"owner"`
	// Attempt is the attempt that was cut short.
	Attempt int `json:"attempt"`
	// State is where the job went: retrying, paused, dead or cancelled.
	State State `json:"state"`
}
