package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Work that follows a job: results recorded with outcomes, jobs inserted
// atomically when a job ends (completion callbacks, chains) and batches
// whose completion job runs once every child has ended. Each is an
// optional ability (found by type assertion); a store that lacks one must
// not be handed its fields (the scheduler refuses the options that need
// them), and refuses them with ErrInvalidParams if it is.

// MaxResultSize bounds a job's result, in bytes of JSON.
const MaxResultSize = 256 << 10

// FollowUp is a job to insert when its parent job reaches a final state.
type FollowUp struct {
	// On lists the final states (succeeded, dead, cancelled) that insert
	// Job; at least one.
	On []State `json:"on"`
	// Job is the job to insert. Its ID and UniqueKey are ignored: the
	// store gives it a fresh UUIDv7 each time the parent becomes final
	// (a dead job retried by hand with RunNow can end, and insert its
	// follow-ups, again). Delay counts from the parent's end.
	Job InsertParams `json:"job"`
}

// Validate reports, wrapping ErrInvalidParams, the first problem with f.
func (f *FollowUp) Validate() error {
	if len(f.On) == 0 {
		return fmt.Errorf("%w: follow-up with no final state", ErrInvalidParams)
	}
	for _, st := range f.On {
		if !st.Final() {
			return fmt.Errorf("%w: follow-up on %q, which is not a final state", ErrInvalidParams, st)
		}
	}
	j := f.Job
	j.ID, j.UniqueKey = uuid.UUID{1}, ""
	if len(j.FollowUps) > 0 {
		return fmt.Errorf("%w: a follow-up cannot have follow-ups of its own", ErrInvalidParams)
	}
	if err := j.Validate(); err != nil {
		return fmt.Errorf("follow-up job: %w", err)
	}
	return nil
}

// FollowUpStore is implemented by stores that insert a job's FollowUps
// (InsertParams.FollowUps), in the same atomic operation, whenever the job
// becomes final — whatever makes it final: Finish, RescueExpired (attempts
// used up, or a cancel requested), Control (cancel) or Bulk (cancel) — and
// that record results (FinishParams.Result) and insert a successful
// attempt's FinishParams.Then. Inserted follow-ups carry the parent's ID in
// JobRecord.Parent. Unique keys do not apply to follow-ups.
type FollowUpStore interface {
	// FollowUps returns the jobs the finalizations of job id inserted, by
	// their Parent, oldest first.
	FollowUps(ctx context.Context, id uuid.UUID) ([]*JobRecord, error)
}

// MaxBatchSize is the most children one batch holds.
const MaxBatchSize = 100_000

// BatchParams creates a batch: its children and the job that completes it.
type BatchParams struct {
	// ID names the batch (a UUIDv7 chosen by the caller).
	ID uuid.UUID
	// Children are the batch's jobs (1 to MaxBatchSize), inserted with the
	// batch, atomically. Their Batch field is set by the store.
	Children []InsertParams
	// Completion is the job inserted, once, when every child has reached
	// a final state (succeeded, dead or cancelled): its handler reads the
	// children's states and results (BatchStore.BatchChildren). Its ID is
	// chosen by the caller, so it is known before it exists.
	Completion InsertParams
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *BatchParams) Validate() error {
	switch {
	case p.ID == uuid.Nil:
		return fmt.Errorf("%w: batch ID is not set", ErrInvalidParams)
	case len(p.Children) == 0 || len(p.Children) > MaxBatchSize:
		return fmt.Errorf("%w: a batch has 1 to %d children, not %d", ErrInvalidParams, MaxBatchSize, len(p.Children))
	}
	for i := range p.Children {
		if err := p.Children[i].Validate(); err != nil {
			return fmt.Errorf("batch child %d: %w", i, err)
		}
	}
	if err := p.Completion.Validate(); err != nil {
		return fmt.Errorf("batch completion job: %w", err)
	}
	return nil
}

// BatchRecord is a batch's progress.
type BatchRecord struct {
	ID uuid.UUID `json:"id"`
	// Total is the number of children.
	Total int `json:"total"`
	// Succeeded, Dead and Cancelled count children in those final states;
	// Pending counts the others (Total minus the three).
	Succeeded int `json:"succeeded"`
	Dead      int `json:"dead"`
	Cancelled int `json:"cancelled"`
	Pending   int `json:"pending"`
	// Completion is the ID of the completion job (inserted once Pending
	// reached zero; its ID is known from the start). A batch reopened by
	// a retried child inserts its completion job again under a fresh ID
	// (BatchStore); Completion names the first.
	Completion uuid.UUID `json:"completion"`
	// Completed reports that the completion job was inserted, and no
	// child was retried since.
	Completed bool `json:"completed"`
	// CreatedAt is when the batch was inserted (store clock); CompletedAt
	// when its last child ended (zero before).
	CreatedAt   time.Time `json:"created_at"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
}

// BatchResult is what InsertBatch did.
type BatchResult struct {
	// Children are the children's insert results, in order (a child whose
	// unique key was held is a duplicate and does not count in the batch).
	Children []InsertResult
}

// BatchStore is implemented by stores that keep batches. When a child
// reaches a final state, by whatever path, the batch's counts change in
// the same atomic operation; the operation that ends the last child
// inserts the completion job, so it is inserted exactly once per
// completion of the batch.
//
// A child taken out of a final state (OpRunNow, BulkRunNow of a dead or
// cancelled child) is pending again. When its batch had completed, the
// batch reopens: Completed false, CompletedAt zero. When its last open
// child ends again the batch completes again, and the completion job is
// inserted again, as a new job: a fresh UUIDv7 (BatchRecord.Completion
// keeps naming the first, whose ID the caller chose), Batch the batch,
// Parent the child whose end completed it, so that its handler reads the
// children's new states. An earlier completion job is left as it is
// (it may not have run yet). Completion jobs are not children: they
// always have a Parent, children never do; BatchChildren and CancelBatch
// leave them out, and their ends do not count.
type BatchStore interface {
	// InsertBatch inserts the batch and its children atomically. A batch
	// whose children are all duplicates (their unique keys held) is not
	// stored: InsertBatch returns the children's results and leaves no
	// batch record (Batch returns ErrNotFound) and no completion job.
	InsertBatch(ctx context.Context, params *BatchParams) (*BatchResult, error)

	// Batch returns the batch's progress, or ErrNotFound.
	Batch(ctx context.Context, id uuid.UUID) (*BatchRecord, error)

	// BatchChildren returns a page of the batch's children, by ID, after
	// the cursor after (zero: from the start), at most limit (1 to
	// MaxListLimit).
	BatchChildren(ctx context.Context, id uuid.UUID, after uuid.UUID, limit int) ([]*JobRecord, error)

	// CancelBatch cancels the batch's children that have not started
	// (scheduled, retrying, paused) and asks running ones to stop, as
	// OpCancel does, and returns how many it changed.
	CancelBatch(ctx context.Context, id uuid.UUID) (int, error)
}

// checkResult reports why r is not a storable result: JSON of at most
// MaxResultSize bytes.
func checkResult(r json.RawMessage) error {
	if r == nil {
		return nil
	}
	if len(r) > MaxResultSize {
		return fmt.Errorf("%w: result is %d bytes, more than %d", ErrInvalidParams, len(r), MaxResultSize)
	}
	if !json.Valid(r) {
		return fmt.Errorf("%w: result is not valid JSON", ErrInvalidParams)
	}
	return nil
}
