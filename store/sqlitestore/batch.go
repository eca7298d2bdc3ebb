package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// InsertBatch inserts the batch and its children in one transaction, as
// store.BatchStore documents: every row is checked first; children whose
// unique key is held are duplicates, left out of the batch. A batch whose
// children are all duplicates is not stored (no record, no completion). A batch ID or completion
// job ID that exists already fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) InsertBatch(ctx context.Context, params *store.BatchParams) (*store.BatchResult, error) {
	if params == nil {
		return nil, fmt.Errorf("insert batch: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("insert batch %s: %w", params.ID, err)
	}
	tmpl, err := encodeParams(&params.Completion)
	if err != nil {
		return nil, fmt.Errorf("insert batch %s: %w: completion: %w", params.ID, store.ErrInvalidParams, err)
	}
	var res *store.BatchResult
	err = s.write(ctx, func(w *wtx) error {
		var err error
		res, err = w.insertBatch(params, tmpl)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert batch %s: %w", params.ID, err)
	}
	return res, nil
}

// InsertBatchTx inserts the batch, as InsertBatch does, inside tx, a
// transaction of the caller's on the Store's file (begin it on DB), so
// that the batch exists only if tx commits: ax.ScheduleBatchTxOf calls
// it. Subscribers are notified at once, as by InsertTx. On an error, roll
// tx back.
func (s *Store) InsertBatchTx(ctx context.Context, tx *sql.Tx, params *store.BatchParams) (*store.BatchResult, error) {
	if tx == nil {
		return nil, fmt.Errorf("insert batch in tx: %w: nil transaction", store.ErrInvalidParams)
	}
	if params == nil {
		return nil, fmt.Errorf("insert batch in tx: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("insert batch %s in tx: %w", params.ID, err)
	}
	tmpl, err := encodeParams(&params.Completion)
	if err != nil {
		return nil, fmt.Errorf("insert batch %s in tx: %w: completion: %w", params.ID, store.ErrInvalidParams, err)
	}
	if err := s.usable(ctx); err != nil {
		return nil, fmt.Errorf("insert batch %s in tx: %w", params.ID, err)
	}
	w := &wtx{s: s, ctx: context.WithoutCancel(ctx), tx: tx, now: s.clock()}
	res, err := w.insertBatch(params, tmpl)
	if err != nil {
		return nil, fmt.Errorf("insert batch %s in tx: %w", params.ID, s.dbErr(err))
	}
	s.subs.deliver(w.notes.list)
	return res, nil
}

// insertBatch inserts a validated batch whose completion template is tmpl.
func (w *wtx) insertBatch(params *store.BatchParams, tmpl string) (*store.BatchResult, error) {
	var one int
	err := w.queryRow(qIDExists, params.Completion.ID[:]).Scan(&one)
	switch {
	case err == nil:
		return nil, fmt.Errorf("%w: completion job ID %s already exists", store.ErrInvalidParams, params.Completion.ID)
	case !isNoRows(err):
		return nil, err
	}
	children, err := w.insert(params.Children, params.ID)
	if err != nil {
		return nil, err
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
	if _, err := w.exec(qBatchInsert, params.ID[:], params.Completion.ID[:], tmpl, total, total, toUS(w.now)); err != nil {
		if isConstraint(err) {
			return nil, fmt.Errorf("%w: batch ID %s already exists", store.ErrInvalidParams, params.ID)
		}
		return nil, err
	}
	return &store.BatchResult{Children: children}, nil
}

// Batch returns the batch's progress, or an error wrapping
// store.ErrNotFound. The counts are kept with the batch (pruned children
// count in the state they ended in), so the call reads one row.
func (s *Store) Batch(ctx context.Context, id uuid.UUID) (*store.BatchRecord, error) {
	var rec *store.BatchRecord
	err := s.read(ctx, false, func(r *rtx) error {
		var (
			completion  []byte
			completed   int64
			createdAt   int64
			completedAt sql.NullInt64
		)
		b := &store.BatchRecord{ID: id}
		err := r.queryRow(qBatchGet, id[:]).Scan(&completion, &b.Total, &b.Succeeded, &b.Dead, &b.Cancelled,
			&completed, &createdAt, &completedAt)
		if isNoRows(err) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if b.Completion, err = idFrom(completion); err != nil {
			return err
		}
		b.Pending = b.Total - b.Succeeded - b.Dead - b.Cancelled
		b.Completed = completed != 0
		b.CreatedAt, b.CompletedAt = fromUS(createdAt), fromNullUS(completedAt)
		rec = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	return rec, nil
}

// BatchChildren returns the batch's children after the cursor, by ID, at
// most limit (1 to store.MaxListLimit); pruned children are left out. An
// unknown batch fails with an error wrapping store.ErrNotFound.
func (s *Store) BatchChildren(ctx context.Context, id, after uuid.UUID, limit int) ([]*store.JobRecord, error) {
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("batch %s children: %w: limit %d not in [1, %d]", id, store.ErrInvalidParams, limit, store.MaxListLimit)
	}
	var out []*store.JobRecord
	err := s.read(ctx, true, func(r *rtx) error {
		var completion []byte
		var tmpl string
		var completed int64
		err := r.queryRow(qBatchLoad, id[:]).Scan(&completion, &tmpl, &completed)
		if isNoRows(err) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		out, err = records(r.query(qBatchChildren, id[:], after[:], completion, limit))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("batch %s children: %w", id, err)
	}
	return out, nil
}

// CancelBatch cancels, in one transaction, the batch's children as
// OpCancel would (those not started are cancelled, running ones asked to
// stop), and returns how many changed. An unknown batch fails with an
// error wrapping store.ErrNotFound.
func (s *Store) CancelBatch(ctx context.Context, id uuid.UUID) (int, error) {
	n := 0
	err := s.write(ctx, func(w *wtx) error {
		n = 0
		var completion []byte
		var tmpl string
		var completed int64
		err := w.queryRow(qBatchLoad, id[:]).Scan(&completion, &tmpl, &completed)
		if isNoRows(err) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		js, err := loadAll(w.query(qBatchOpenChildren, id[:], completion))
		if err != nil {
			return err
		}
		for _, j := range js {
			changed, err := w.control(j, store.OpCancel)
			if err != nil {
				return err
			}
			if changed {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	return n, nil
}
