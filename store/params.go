package store

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// InsertParams describes one job to insert.
type InsertParams struct {
	// ID must be set by the caller (a UUIDv7).
	ID uuid.UUID `json:"id,omitzero"`
	// Kind must be a non-empty text (CheckText) of at most MaxKindLength
	// bytes.
	Kind string `json:"kind"`
	// Payload must be valid JSON in valid UTF-8, at most MaxPayloadSize
	// bytes. Nil is stored as the JSON value null. Stores keep it byte
	// for byte as given.
	Payload json.RawMessage `json:"payload"`
	// Metadata is optional; see CheckMetadata for its limits.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Priority must be PriorityHigh, PriorityNormal or PriorityLow.
	Priority int `json:"priority"`
	// RunAt, when not zero, is the absolute time the job becomes due,
	// within [MinTime, MaxTime].
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay, used when RunAt is zero, makes the job due Delay after the
	// store's now. It must not be negative.
	Delay time.Duration `json:"delay,omitzero"`
	// MaxAttempts must be from 1 to MaxAttemptsLimit.
	MaxAttempts int `json:"max_attempts"`
	// UniqueKey, when not empty, makes the insert a no-op returning the
	// holder's ID when another job holds the same key in the same scope
	// (see UniqueScope). It is a text of at most MaxUniqueKeyLength bytes.
	UniqueKey string `json:"unique_key,omitempty"`
	// Unique says where and for how long UniqueKey holds; ignored without
	// a UniqueKey. The zero value is the default scope.
	Unique UniqueScope `json:"unique,omitzero"`
	// FollowUps are jobs inserted when this job reaches a final state (see
	// FollowUpStore; only stores that implement it accept them).
	FollowUps []FollowUp `json:"follow_ups,omitempty"`
	// SequenceKey, when not empty, makes the job one of a sequence: the
	// jobs of its kind with the same key run one at a time, in
	// (ScheduledAt, ID) order (FlowStore only). A text of at most
	// MaxPartitionKeyLength bytes.
	SequenceKey string `json:"sequence_key,omitempty"`
	// PendingLimit, when > 0, bounds the pending jobs of all kinds: the
	// Insert fails with a PendingLimitError when the store's pending jobs
	// plus the call's rows would exceed it (FlowStore only).
	PendingLimit int `json:"pending_limit,omitempty"`
}

// UniqueScope is where and for how long a job's unique key holds. The zero
// value is the default: the key is unique among the jobs of the same kind,
// and held while the job is live (scheduled, retrying, paused or running),
// so that a finished job frees its key at once.
//
// Whatever the scope, a cancelled job never holds its key. Stores enforce
// the scope atomically (an index or an equivalent), never by reading
// before writing.
//
// OpRunNow of a dead or cancelled job makes it live, so it holds its key
// again: when it gave the key up on ending (cancelled, or dead in a scope
// that frees finished jobs' keys) and another job holds the key
// meanwhile, nothing changes and the operation fails with ErrWrongState
// (BulkRunNow leaves such a job alone).
type UniqueScope struct {
	// Global makes the key unique across all kinds, not only among jobs of
	// the same kind.
	Global bool `json:"global,omitempty"`
	// Finished keeps the key held by succeeded and dead jobs too, until
	// they are pruned (a key that must never run twice, such as a payment
	// reference).
	Finished bool `json:"finished,omitempty"`
	// Period, when > 0, buckets the key by time: the key holds among jobs
	// whose insert fell in the same window of Period (windows are aligned
	// to the Unix epoch in the store's clock: [k·Period, (k+1)·Period)),
	// in every state but cancelled (Finished is implied within the
	// window). At most one job per key per window results. It must be a
	// whole number of seconds, at most MaxUniquePeriod.
	Period time.Duration `json:"period,omitzero"`
}

// MaxUniquePeriod is the longest UniqueScope.Period.
const MaxUniquePeriod = 366 * 24 * time.Hour

// Validate reports, wrapping ErrInvalidParams, the first problem with u.
func (u UniqueScope) Validate() error {
	if u.Period < 0 || u.Period > MaxUniquePeriod || u.Period%time.Second != 0 {
		return fmt.Errorf("%w: unique period %s is not a whole number of seconds in [0, %s]", ErrInvalidParams, u.Period, MaxUniquePeriod)
	}
	return nil
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
// Stores call it for every row before writing any.
func (p *InsertParams) Validate() error {
	switch {
	case p.ID == uuid.Nil:
		return fmt.Errorf("%w: job ID is not set", ErrInvalidParams)
	case p.Kind == "":
		return fmt.Errorf("%w: empty kind", ErrInvalidParams)
	case len(p.Payload) > MaxPayloadSize:
		return fmt.Errorf("%w: payload is %d bytes, more than %d", ErrInvalidParams, len(p.Payload), MaxPayloadSize)
	case p.Payload != nil && (!json.Valid(p.Payload) || !utf8.Valid(p.Payload)):
		return fmt.Errorf("%w: payload is not valid JSON in UTF-8", ErrInvalidParams)
	case p.Priority < PriorityHigh || p.Priority > PriorityLow:
		return fmt.Errorf("%w: priority %d out of range [%d, %d]", ErrInvalidParams, p.Priority, PriorityHigh, PriorityLow)
	case p.Delay < 0:
		return fmt.Errorf("%w: negative delay %s", ErrInvalidParams, p.Delay)
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit:
		return fmt.Errorf("%w: max attempts %d not in [1, %d]", ErrInvalidParams, p.MaxAttempts, MaxAttemptsLimit)
	}
	if err := CheckText(p.Kind, MaxKindLength); err != nil {
		return fmt.Errorf("%w: kind: %w", ErrInvalidParams, err)
	}
	if err := CheckText(p.UniqueKey, MaxUniqueKeyLength); err != nil {
		return fmt.Errorf("%w: unique key: %w", ErrInvalidParams, err)
	}
	if err := CheckText(p.SequenceKey, MaxPartitionKeyLength); err != nil {
		return fmt.Errorf("%w: sequence key: %w", ErrInvalidParams, err)
	}
	if p.PendingLimit < 0 || p.PendingLimit > MaxAttemptsLimit {
		return fmt.Errorf("%w: pending limit %d not in [0, %d]", ErrInvalidParams, p.PendingLimit, MaxAttemptsLimit)
	}
	if err := p.Unique.Validate(); err != nil {
		return err
	}
	for i := range p.FollowUps {
		if err := p.FollowUps[i].Validate(); err != nil {
			return fmt.Errorf("follow-up %d: %w", i, err)
		}
	}
	if err := CheckMetadata(p.Metadata); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	if !p.RunAt.IsZero() {
		if err := CheckTime(p.RunAt); err != nil {
			return fmt.Errorf("%w: run at: %w", ErrInvalidParams, err)
		}
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
	// AgeAfter, when > 0, is the priority aging bound (FlowStore only):
	// jobs due for at least AgeAfter (run_at at or before now −
	// AgeAfter) are claimed first, oldest first, whatever their
	// priority. Zero keeps priorities strict.
	AgeAfter time.Duration
	// Ahead, when > 0, lets the claim also take jobs that fall due within
	// Ahead after the store's now (run_at <= now + Ahead), so that a
	// runtime can hold them and start each at its run_at instead of one
	// claim round trip after it. A store may apply a shorter window or
	// none (ClaimResult.Ahead says which). A job claimed before its
	// run_at gets AttemptedAt = run_at: the attempt is meant to start
	// then, and the runtime does not start it earlier (see
	// ClaimResult.Clock). At most MaxClaimAhead.
	Ahead time.Duration
}

// MaxClaimAhead bounds ClaimParams.Ahead: a claim takes jobs at most this
// long before they fall due.
const MaxClaimAhead = time.Second

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *ClaimParams) Validate() error {
	if p.Limit < 1 {
		return fmt.Errorf("%w: claim limit %d < 1", ErrInvalidParams, p.Limit)
	}
	if p.LeaseDuration <= 0 {
		return fmt.Errorf("%w: lease duration %s <= 0", ErrInvalidParams, p.LeaseDuration)
	}
	if p.AgeAfter < 0 {
		return fmt.Errorf("%w: negative priority aging %s", ErrInvalidParams, p.AgeAfter)
	}
	if p.Ahead < 0 || p.Ahead > MaxClaimAhead {
		return fmt.Errorf("%w: claim ahead %s not in [0, %s]", ErrInvalidParams, p.Ahead, MaxClaimAhead)
	}
	if err := CheckText(p.Owner, MaxKindLength); err != nil {
		return fmt.Errorf("%w: owner: %w", ErrInvalidParams, err)
	}
	for _, k := range p.Kinds {
		if k.Kind == "" || k.Limit < 1 {
			return fmt.Errorf("%w: kind limit %q=%d", ErrInvalidParams, k.Kind, k.Limit)
		}
		if err := CheckText(k.Kind, MaxKindLength); err != nil {
			return fmt.Errorf("%w: claim kind: %w", ErrInvalidParams, err)
		}
	}
	return nil
}

// ClaimResult is what a claim took and what it learned.
type ClaimResult struct {
	// Jobs are the claimed jobs, now running under fresh lease tokens, in
	// claim order (priority, then run_at).
	Jobs []*JobRecord
	// Now is the store's clock at the claim: a job is due when its run_at
	// is at or before Now.
	Now time.Time
	// Ahead is the window the claim applied of ClaimParams.Ahead (zero:
	// it took only due jobs). Jobs with RunAt after Now were claimed
	// ahead and have AttemptedAt = RunAt.
	Ahead time.Duration
	// Clock is a reading of the store's clock taken as late in the claim
	// as the store can (at or after Now; zero: the store gives none
	// besides Now). The store's clock had reached at least Clock when the
	// claim returned, so a job claimed ahead is never started early by
	// the store's clock if the runtime waits RunAt − Clock from the moment
	// the claim returned.
	Clock time.Time
	// NextRunAt is the earliest run_at among the claimable jobs of the
	// requested kinds that this claim left behind, or zero when there are
	// none. It is at or before Now + Ahead when claimable jobs remain (the
	// limit was hit, or another claimer holds them).
	// A FlowStore counts a job that flow control holds back until a given
	// time at that time, and leaves out the jobs held back until a running
	// job ends (see FlowStore).
	NextRunAt time.Time
	// Breakers lists the breaker transitions the claim made (a FlowStore
	// starting a probe: open to half_open).
	Breakers []BreakerTransition
}

// ExtendParams asks to extend running leases.
type ExtendParams struct {
	Leases []Lease
	// Duration is the new lease length, from the store's now (> 0).
	Duration time.Duration
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *ExtendParams) Validate() error {
	if p.Duration <= 0 {
		return fmt.Errorf("%w: lease duration %s <= 0", ErrInvalidParams, p.Duration)
	}
	return nil
}

// ExtendResult reports leases that could not be extended and cancellations
// requested for the rest. Leases, not job IDs, are reported, since one
// caller may send two leases of the same job (an attempt whose outcome is
// being written and the job's next attempt).
//
// A lease whose job's row another transaction holds locked (a handler's
// CompleteTx not yet committed, a rescue or a finish in flight) may be
// left unextended for this call rather than waited for: it is still held,
// and it is reported in neither Lost nor Finished. Such a lease cannot be
// rescued while the lock lasts (rescues skip locked rows), and the next
// call extends it once the lock is gone, or reports it lost or finished.
type ExtendResult struct {
	// Lost lists the leases the caller no longer holds (token changed, job
	// rescued, finished or pruned). Their results will be refused.
	Lost []Lease
	// Finished lists the leases of Lost whose job left running through
	// an outcome written under that very lease (Finish with its token, or
	// a committed CompleteTx): the holder itself ended the attempt, so it
	// was not taken over and its handler need not be stopped. The other
	// leases of Lost were taken from their holder (rescued, re-claimed,
	// pruned) and their handlers must stop. A store that cannot tell the
	// two apart leaves Finished empty, and its callers then treat every
	// lost lease as taken over.
	Finished []Lease
	// CancelRequested lists the still-held leases whose job a user asked
	// to cancel.
	CancelRequested []Lease
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
	// Error is recorded in the job's Errors for retry, dead and cancelled:
	// a text (CheckText) of at most MaxErrorLength bytes (TruncateText
	// makes any string one).
	Error string
	// Result, when set, is recorded as the job's result (JSON, at most
	// MaxResultSize bytes; FollowUpStore stores only).
	Result json.RawMessage
	// Then are jobs inserted with this outcome, atomically, when it is
	// applied and the job becomes succeeded: follow-ups a handler decided
	// on (FollowUpStore stores only), with Parent set to the job. Their
	// IDs are set by the caller; unique keys do not apply to them.
	Then []InsertParams
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
// Stores call it for every row before writing any.
func (p *FinishParams) Validate() error {
	switch {
	case p.Outcome < OutcomeSucceeded || p.Outcome > OutcomeCancelled:
		return fmt.Errorf("%w: job %s: unknown outcome %s", ErrInvalidParams, p.Lease.ID, p.Outcome)
	case p.Delay < 0:
		return fmt.Errorf("%w: job %s: negative delay %s", ErrInvalidParams, p.Lease.ID, p.Delay)
	}
	if err := CheckText(p.Error, MaxErrorLength); err != nil {
		return fmt.Errorf("%w: job %s: error text: %w", ErrInvalidParams, p.Lease.ID, err)
	}
	if err := checkResult(p.Result); err != nil {
		return fmt.Errorf("job %s: %w", p.Lease.ID, err)
	}
	for i := range p.Then {
		if err := p.Then[i].Validate(); err != nil {
			return fmt.Errorf("job %s: follow-up %d: %w", p.Lease.ID, i, err)
		}
	}
	return nil
}

// ControlOp is a user's request on one job.
type ControlOp int

// Control operations.
const (
	// OpCancel: scheduled, retrying, paused → cancelled. Running → cancel
	// requested (the owner cancels the handler at its next heartbeat).
	// Cancelled → no change. Succeeded, dead → ErrWrongState.
	OpCancel ControlOp = iota + 1
	// OpPause: scheduled, retrying → paused. Paused → no change. Running
	// → pause requested: the attempt is never interrupted; when it ends
	// with a retry, snooze or hand-back (or its lease is rescued with
	// attempts left) the job becomes paused instead, with the run_at it
	// would have had; a success, a dead end or a cancel end as usual.
	// Succeeded, dead, cancelled → ErrWrongState.
	OpPause
	// OpResume: paused → scheduled, run_at kept. Running with a pause
	// requested → the request is withdrawn. Scheduled, retrying, running
	// → no change. Others → ErrWrongState.
	OpResume
	// OpRunNow: scheduled, retrying, paused → scheduled with run_at = now.
	// Dead, cancelled → scheduled with run_at = now, errors kept and
	// attempt kept: the next attempt's number follows the last one (the
	// handler, logs and error list see attempt n+1, never a second
	// attempt 1), and a job that used all its attempts gets one more
	// (MaxAttempts becomes Attempt+1). Running, succeeded → ErrWrongState.
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
