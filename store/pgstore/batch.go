package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Batches. The batches row holds the completion job's template and the
// counts of children by final state. The triggers of migration 0006 (0017
// since) count the children a statement ends, in that statement, once per
// batch, and the statement that leaves none open inserts the completion
// job; a statement that reopens a child of a completed batch (RunNow)
// reopens the batch, and its next completion inserts the completion job
// again, under a fresh ID. The batch row's lock orders concurrent
// statements, so exactly one of them sees the last count.

// InsertBatch inserts the batch and its children in one transaction, as
// store.BatchStore documents (a batch whose children are all duplicates
// is not stored). Children go through Insert's own path (COPY for those
// without a unique key), so 100,000 children take one COPY stream. A
// batch ID or completion job ID that exists already fails with an error
// wrapping store.ErrInvalidParams, as do params that BatchParams.Validate
// refuses (checked before anything is sent).
func (s *Store) InsertBatch(ctx context.Context, params *store.BatchParams) (*store.BatchResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := validateBatch(params); err != nil {
		return nil, err
	}
	defer s.cursors.hold(params.Children)() // until committed (cursor.go)
	var res *store.BatchResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.insertBatch(ctx, tx, params)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert batch %s: %w", params.ID, invalidData(err))
	}
	return res, nil
}

// InsertBatchTx is InsertBatch inside the caller's transaction tx: the
// batch exists only if tx commits, and listeners hear of its children
// then. On error, tx is left for the caller to roll back.
func (s *Store) InsertBatchTx(ctx context.Context, tx pgx.Tx, params *store.BatchParams) (*store.BatchResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("pgstore: insert batch: nil transaction: %w", store.ErrInvalidParams)
	}
	if err := validateBatch(params); err != nil {
		return nil, err
	}
	ctx = withConn(ctx, tx) // every read on tx, none on a second connection: onetx.go
	res, err := s.insertBatch(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert batch %s: %w", params.ID, invalidData(err))
	}
	return res, nil
}

func validateBatch(params *store.BatchParams) error {
	if params == nil {
		return fmt.Errorf("pgstore: insert batch: nil params: %w", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("pgstore: insert batch %s: %w", params.ID, err)
	}
	return nil
}

// insertBatch writes a validated batch on tx.
func (s *Store) insertBatch(ctx context.Context, tx pgx.Tx, params *store.BatchParams) (*store.BatchResult, error) {
	tmpl, err := encodeTemplate(&params.Completion)
	if err != nil {
		return nil, fmt.Errorf("%w: completion: %w", store.ErrInvalidParams, err)
	}
	var batchTaken, completionTaken bool
	err = tx.QueryRow(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {batches} WHERE id = $1),
	EXISTS (SELECT 1 FROM {alljobs} WHERE id = $2)`), [16]byte(params.ID), [16]byte(params.Completion.ID)).Scan(&batchTaken, &completionTaken)
	switch {
	case err != nil:
		return nil, err
	case batchTaken:
		return nil, fmt.Errorf("%w: batch ID %s already exists", store.ErrInvalidParams, params.ID)
	case completionTaken:
		return nil, fmt.Errorf("%w: completion job ID %s already exists", store.ErrInvalidParams, params.Completion.ID)
	}
	// The children take their batch from the column default, which reads
	// ax.batch_id (migration 0006), set for this transaction only while
	// they are inserted: the caller's later inserts in tx must not get it.
	if _, err := tx.Exec(ctx, `SELECT set_config('ax.batch_id', $1, true)`, params.ID.String()); err != nil {
		return nil, fmt.Errorf("set batch: %w", err)
	}
	children, err := s.insertRows(ctx, tx, params.Children) // the one insert path: keys, bounds, follow-ups
	if err != nil {
		return nil, fmt.Errorf("insert children: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('ax.batch_id', '', true)`); err != nil {
		return nil, fmt.Errorf("reset batch: %w", err)
	}
	total := 0
	for _, c := range children {
		if !c.Duplicate {
			total++
		}
	}
	if total == 0 {
		return &store.BatchResult{Children: children}, nil // no child to wait for: no batch
	}
	if _, err := tx.Exec(ctx, s.sql(`INSERT INTO {batches} (id, completion, template, total)
VALUES ($1, $2, $3, $4)`), [16]byte(params.ID), [16]byte(params.Completion.ID), tmpl, total); err != nil {
		return nil, fmt.Errorf("insert batch record: %w", err)
	}
	return &store.BatchResult{Children: children}, nil
}

// Batch returns the batch's progress from its row (one read, whatever
// the number of children; pruned children count in the state they ended
// in), or an error wrapping store.ErrNotFound.
func (s *Store) Batch(ctx context.Context, id uuid.UUID) (*store.BatchRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	b := &store.BatchRecord{ID: id}
	var completedAt *time.Time
	err := s.pool.QueryRow(ctx, s.sql(`SELECT completion, total, succeeded, dead, cancelled, completed, created_at, completed_at
FROM {batches} WHERE id = $1`), [16]byte(id)).Scan((*[16]byte)(&b.Completion), &b.Total, &b.Succeeded, &b.Dead, &b.Cancelled,
		&b.Completed, &b.CreatedAt, &completedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: batch %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: batch %s: %w", id, err)
	}
	b.Pending = b.Total - b.Succeeded - b.Dead - b.Cancelled
	if completedAt != nil {
		b.CompletedAt = *completedAt
	}
	return b, nil
}

// BatchChildren returns the batch's children after the cursor after, by
// ID, at most limit (1 to store.MaxListLimit), through the jobs_batch_idx
// index; pruned children are left out. An unknown batch fails with an
// error wrapping store.ErrNotFound.
func (s *Store) BatchChildren(ctx context.Context, id, after uuid.UUID, limit int) ([]*store.JobRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("pgstore: batch %s children: limit %d not in [1, %d]: %w", id, limit, store.MaxListLimit, store.ErrInvalidParams)
	}
	// The completion jobs share the batch_id of their children; they are
	// left out by their parent (the child whose end completed the batch;
	// children have none) and, for the parentless one older code made for
	// a batch of duplicates only, by its ID, read from the batch row (no
	// row: no batch).
	rows, _ := s.pool.Query(ctx, s.sql(`SELECT {cols} FROM {alljobs}
WHERE batch_id = $1 AND id > $2 AND parent IS NULL AND id <> (SELECT completion FROM {batches} WHERE id = $1)
ORDER BY id LIMIT $3`), [16]byte(id), [16]byte(after), limit)
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: batch %s children: %w", id, err)
	}
	if len(jobs) == 0 {
		if _, err := s.Batch(ctx, id); err != nil {
			return nil, fmt.Errorf("pgstore: batch %s children: %w", id, err)
		}
		jobs = []*store.JobRecord{}
	}
	return jobs, nil
}

// cancelBatchSQL is CancelBatch's statement ($1 the batch): whether the
// batch exists, and how many children it changed.
const cancelBatchSQL = `WITH b AS (
	SELECT completion FROM {batches} WHERE id = $1
), locked AS MATERIALIZED (
	SELECT j.id FROM {jobs} j
	WHERE j.batch_id = $1 AND j.parent IS NULL AND j.id <> (SELECT completion FROM b)
	  AND (j.state IN ('scheduled', 'retrying', 'paused') OR (j.state = 'running' AND NOT j.cancel_requested))
	ORDER BY j.id
	FOR UPDATE OF j
), changed AS (
	UPDATE {jobs} j SET
		state = CASE WHEN j.state = 'running' THEN j.state ELSE 'cancelled' END,
		cancel_requested = (j.state = 'running'),
		finished_at = CASE WHEN j.state = 'running' THEN j.finished_at ELSE now() END
	-- By the IDs as an array, not a join with locked (the package doc:
	-- generic plans).
	WHERE j.id = ANY (ARRAY(SELECT id FROM locked))
	  AND (j.state IN ('scheduled', 'retrying', 'paused') OR (j.state = 'running' AND NOT j.cancel_requested))
	RETURNING j.id
)
SELECT EXISTS (SELECT 1 FROM b), (SELECT count(*) FROM changed)`

// CancelBatch cancels, in one statement, the batch's children as OpCancel
// would: those not started (scheduled, retrying, paused) become
// cancelled, running ones are asked to stop (their owner learns of it at
// its next heartbeat). It returns how many it changed; a running child
// already asked to stop does not count. The children are locked in ID
// order before any is changed, so that a concurrent Finish of a child
// (which locks the child, then the batch row) waits rather than
// deadlocks. An unknown batch fails with an error wrapping
// store.ErrNotFound.
func (s *Store) CancelBatch(ctx context.Context, id uuid.UUID) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var found bool
	var n int
	err := s.pool.QueryRow(ctx, s.sql(cancelBatchSQL), [16]byte(id)).Scan(&found, &n)
	if err != nil {
		return 0, fmt.Errorf("pgstore: cancel batch %s: %w", id, err)
	}
	if !found {
		return 0, fmt.Errorf("pgstore: cancel batch %s: %w", id, store.ErrNotFound)
	}
	return n, nil
}
