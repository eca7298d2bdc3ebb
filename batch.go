package ax

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Batch is work fanned out to many jobs and gathered by one: Children run
// anywhere in the cluster, and Completion runs once, after every child has
// reached a final state (succeeded, dead or cancelled) — a dead child does
// not hold it back, it sees the failure. Children may be of several kinds
// (NewRequest makes each from a JobArgs).
// The completion job's handler finds the batch in Job.Batch and reads the
// children, with their states and results, with Scheduler.BatchChildren.
// A UniqueKey among Completion's options is not kept (the completion is
// inserted once, when the batch ends), as for Then and FollowUp.
type Batch struct {
	Children   []Request
	Completion Request
}

// BatchResult is what ScheduleBatch stored.
type BatchResult struct {
	// ID names the batch (zero when Duplicate).
	ID uuid.UUID `json:"id"`
	// Completion is the ID the completion job will have (zero when
	// Duplicate).
	Completion uuid.UUID `json:"completion"`
	// Children are the children's results, in order (a child whose unique
	// key was held is a duplicate, not part of the batch).
	Children []ScheduleResult `json:"children"`
	// Duplicate reports that every child was a duplicate (its unique key
	// held by another job), so nothing was stored: no batch and no
	// completion job, since there is no child whose end it would wait
	// for. Children name the jobs holding the keys. It is not an error.
	Duplicate bool `json:"duplicate,omitzero"`
}

// BatchStatus is a batch's progress, as Scheduler.Batch reports it.
type BatchStatus = store.BatchRecord

// batchStore returns the store's BatchStore, or an error wrapping
// errors.ErrUnsupported.
func (s *Scheduler) batchStore() (store.BatchStore, error) {
	bs, ok := s.store.(store.BatchStore)
	if !ok {
		return nil, fmt.Errorf("store %T keeps no batches: %w", s.store, errors.ErrUnsupported)
	}
	return bs, nil
}

// txBatchInserter is implemented by stores that insert a batch inside a
// caller's transaction (pgstore).
type txBatchInserter interface {
	InsertBatchTx(ctx context.Context, tx pgx.Tx, params *store.BatchParams) (*store.BatchResult, error)
}

// ScheduleBatch stores a batch — its children and the record that runs its
// completion job once they have all ended — atomically: all of it or
// nothing. A batch whose children are all duplicates (their unique keys
// held) is not stored at all: the result says Duplicate, and no
// completion job runs. Errors are Schedule's, plus an error wrapping
// errors.ErrUnsupported when the store keeps no batches.
func (s *Scheduler) ScheduleBatch(ctx context.Context, b Batch) (*BatchResult, error) {
	return s.scheduleBatch(ctx, b, func(bs store.BatchStore, p *store.BatchParams) (*store.BatchResult, error) {
		return bs.InsertBatch(ctx, p)
	})
}

// ScheduleBatchTx is ScheduleBatch inside the caller's PostgreSQL
// transaction: the batch exists only if tx commits (ErrTxUnsupported for
// stores without transactions).
func (s *Scheduler) ScheduleBatchTx(ctx context.Context, tx pgx.Tx, b Batch) (*BatchResult, error) {
	ti, ok := s.store.(txBatchInserter)
	if !ok {
		return nil, fmt.Errorf("schedule batch in tx: %w", ErrTxUnsupported)
	}
	ctx = inTx(ctx, s, tx)
	return s.scheduleBatch(ctx, b, func(_ store.BatchStore, p *store.BatchParams) (*store.BatchResult, error) {
		return ti.InsertBatchTx(ctx, tx, p)
	})
}

func (s *Scheduler) scheduleBatch(ctx context.Context, b Batch, insert func(store.BatchStore, *store.BatchParams) (*store.BatchResult, error)) (*BatchResult, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("schedule batch: %w", err)
	}
	bs, err := s.batchStore()
	if err != nil {
		return nil, fmt.Errorf("schedule batch: %w", err)
	}
	if len(b.Children) == 0 || len(b.Children) > store.MaxBatchSize {
		return nil, fmt.Errorf("schedule batch: %w: %d children, want 1 to %d", ErrInvalidOption, len(b.Children), store.MaxBatchSize)
	}
	children, err := s.insertParams(ctx, b.Children)
	if err != nil {
		return nil, fmt.Errorf("schedule batch: %w", err)
	}
	completion, err := s.insertParams(ctx, []Request{b.Completion})
	if err != nil {
		return nil, fmt.Errorf("schedule batch completion: %w", err)
	}
	id, err := newJobID()
	if err != nil {
		return nil, fmt.Errorf("schedule batch: new id: %w", err)
	}
	if s.closed() {
		return nil, fmt.Errorf("schedule batch: %w", ErrSchedulerClosed)
	}
	p := &store.BatchParams{ID: id, Children: children, Completion: completion[0]}
	wait, cancel := waitContext(b.Children)
	defer cancel()
	var res *store.BatchResult
	_, err = s.insertWaiting(ctx, wait, children, func([]store.InsertParams) ([]store.InsertResult, error) {
		r, err := insert(bs, p)
		if err != nil {
			return nil, err
		}
		res = r
		return r.Children, nil
	})
	if err != nil {
		return nil, fmt.Errorf("schedule batch of %d: %w", len(children), err)
	}
	s.wakeForInserted(children, res.Children)
	out := &BatchResult{ID: id, Completion: completion[0].ID, Children: s.scheduled(children, res.Children)}
	if allDuplicates(res.Children) {
		out.ID, out.Completion, out.Duplicate = uuid.Nil, uuid.Nil, true
	}
	return out, nil
}

// allDuplicates reports whether every child of a batch was a duplicate,
// which leaves the store without the batch (store.BatchStore).
func allDuplicates(children []store.InsertResult) bool {
	for _, c := range children {
		if !c.Duplicate {
			return false
		}
	}
	return true
}

// Batch returns the progress of batch id (counts of children by outcome,
// pending ones, whether the completion job was inserted), or an error
// wrapping ErrNotFound.
func (s *Scheduler) Batch(ctx context.Context, id uuid.UUID) (*BatchStatus, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	bs, err := s.batchStore()
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	rec, err := bs.Batch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	return rec, nil
}

// BatchChildren returns up to limit (1 to store.MaxListLimit) children of
// batch id, with their states and results, by ID after the cursor after
// (uuid.Nil for the first page). A completion job's handler pages through
// them with the last ID of each page.
func (s *Scheduler) BatchChildren(ctx context.Context, id, after uuid.UUID, limit int) ([]*JobRecord, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("batch %s children: %w", id, err)
	}
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("batch %s children: %w: limit %d not in [1, %d]", id, ErrInvalidOption, limit, store.MaxListLimit)
	}
	bs, err := s.batchStore()
	if err != nil {
		return nil, fmt.Errorf("batch %s children: %w", id, err)
	}
	recs, err := bs.BatchChildren(ctx, id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("batch %s children: %w", id, err)
	}
	openRecords(s.cfg.Keys, true, recs...) // reencrypt.go
	return recs, nil
}

// CancelBatch cancels the children of batch id that have not started and
// asks running ones to stop (see Cancel); the completion job still runs
// once they have all ended, and sees the cancellations. It returns how many
// children it changed.
func (s *Scheduler) CancelBatch(ctx context.Context, id uuid.UUID) (int, error) {
	if err := checkContext(ctx); err != nil {
		return 0, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	bs, err := s.batchStore()
	if err != nil {
		return 0, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	n, err := bs.CancelBatch(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	return n, nil
}
