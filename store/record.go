package store

import (
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
	ID uuid.UUID
	// Kind selects the handler.
	Kind string
	// Payload is the handler's argument, as JSON.
	Payload []byte
	// Metadata is free-form string data carried with the job (trace
	// context, tenant, request id...). Nil when empty.
	Metadata map[string]string
	// State is the job's current state; see State for the machine.
	State State
	// Priority is one of PriorityHigh, PriorityNormal, PriorityLow.
	Priority int
	// RunAt is the earliest time, in the store's clock, the job may start.
	RunAt time.Time
	// Attempt counts the attempts started so far (a claim adds one; a
	// snooze or hand-back takes it back).
	Attempt int
	// MaxAttempts is the number of attempts after which a failure is final.
	MaxAttempts int
	// UniqueKey, when not empty, is unique among the jobs that are not
	// cancelled.
	UniqueKey string
	// Errors holds one entry per failed attempt, oldest first.
	Errors []AttemptError
	// LeaseToken fences the current attempt; zero unless running.
	LeaseToken uuid.UUID
	// LeaseExpiresAt is when the current lease lapses (store clock); zero
	// unless running.
	LeaseExpiresAt time.Time
	// Owner names the node holding, or that last held, the job.
	Owner string
	// CancelRequested is set when a running job was asked to cancel; its
	// owner learns of it at the next lease extension.
	CancelRequested bool
	// CreatedAt is when the job was inserted (store clock).
	CreatedAt time.Time
	// AttemptedAt is when the latest attempt was claimed (store clock).
	AttemptedAt time.Time
	// FinishedAt is when the job entered a final state; zero otherwise.
	FinishedAt time.Time
}

// AttemptError records one failed attempt.
type AttemptError struct {
	// Attempt is the attempt number that failed (1-based).
	Attempt int
	// At is when the failure was recorded (store clock).
	At time.Time
	// Error is the error text, with a stack trace for panics.
	Error string
}

// Lease identifies one attempt of a running job: the job ID and the token
// its claim stamped.
type Lease struct {
	ID    uuid.UUID
	Token uuid.UUID
}
