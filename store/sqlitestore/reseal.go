package sqlitestore

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

var _ store.Resealer = (*Store)(nil)

// resealSQL rewrites one job's sealed values while its payload and result
// are still the old ones (result IS ?: NULL matches NULL). A NULL
// parameter for metadata or follow_ups leaves the column as it is, since
// the caller asks to keep it; an empty map is written as NULL anyway.
const resealSQL = `UPDATE jobs SET payload = ?1,
	result = CASE WHEN ?2 IS NULL THEN result ELSE ?2 END,
	metadata = CASE WHEN ?3 = 1 THEN ?4 ELSE metadata END,
	follow_ups = CASE WHEN ?5 = 1 THEN ?6 ELSE follow_ups END
WHERE id = ?7 AND payload = ?8 AND result IS ?9`

// Reseal implements store.Resealer, in one write transaction.
func (s *Store) Reseal(ctx context.Context, rows []store.ResealParams) ([]bool, error) {
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, fmt.Errorf("reseal row %d: %w", i, err)
		}
	}
	ok := make([]bool, len(rows))
	err := s.write(ctx, func(w *wtx) error {
		for i, p := range rows {
			var result, oldResult any
			if p.OldResult != nil {
				result, oldResult = string(p.Result), string(p.OldResult)
			}
			md, err := encodeMetadata(p.Metadata)
			if err != nil {
				return fmt.Errorf("row %d: %w: metadata: %w", i, store.ErrInvalidParams, err)
			}
			fus, err := encodeFollowUps(p.FollowUps)
			if err != nil {
				return fmt.Errorf("row %d: %w: follow-ups: %w", i, store.ErrInvalidParams, err)
			}
			res, err := w.tx.ExecContext(w.ctx, resealSQL, string(p.Payload), result,
				boolInt(p.Metadata != nil), md, boolInt(p.FollowUps != nil), fus,
				p.ID[:], string(p.OldPayload), oldResult)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			ok[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reseal: %w", err)
	}
	return ok, nil
}

var _ store.BatchResealer = (*Store)(nil)

// pendingCompletionsSQL pages through the batches not completed, by ID.
const pendingCompletionsSQL = `SELECT id, completion, template FROM batches
WHERE completed = 0 AND id > ? ORDER BY id LIMIT ?`

// setTemplateSQL rewrites a batch's completion template while the batch
// has not completed.
const setTemplateSQL = `UPDATE batches SET template = ? WHERE id = ? AND completed = 0`

// PendingCompletions implements store.BatchResealer.
func (s *Store) PendingCompletions(ctx context.Context, after uuid.UUID, limit int) ([]store.PendingCompletion, error) {
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("pending completions: %w: limit %d not in [1, %d]", store.ErrInvalidParams, limit, store.MaxListLimit)
	}
	out := []store.PendingCompletion{}
	err := s.read(ctx, false, func(r *rtx) error {
		out = out[:0]
		rows, err := r.queryText(pendingCompletionsSQL, after[:], limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, completion []byte
			var tmpl string
			if err := rows.Scan(&id, &completion, &tmpl); err != nil {
				return err
			}
			pc, err := pendingCompletion(id, completion, tmpl)
			if err != nil {
				return err
			}
			out = append(out, pc)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pending completions: %w", err)
	}
	return out, nil
}

// pendingCompletion decodes a batch's row.
func pendingCompletion(id, completion []byte, tmpl string) (store.PendingCompletion, error) {
	b, err := idFrom(id)
	if err != nil {
		return store.PendingCompletion{}, err
	}
	c, err := idFrom(completion)
	if err != nil {
		return store.PendingCompletion{}, err
	}
	p, err := decodeParams(tmpl)
	if err != nil {
		return store.PendingCompletion{}, fmt.Errorf("batch %s completion: %w", b, err)
	}
	p.ID = c
	return store.PendingCompletion{Batch: b, Job: *p}, nil
}

// ResealCompletions implements store.BatchResealer, in one write
// transaction.
func (s *Store) ResealCompletions(ctx context.Context, rows []store.CompletionResealParams) ([]bool, error) {
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, fmt.Errorf("reseal completion row %d: %w", i, err)
		}
	}
	ok := make([]bool, len(rows))
	err := s.write(ctx, func(w *wtx) error {
		clear(ok)
		for i := range rows {
			p := &rows[i]
			var completion []byte
			var tmpl string
			var completed int64
			err := w.queryRow(qBatchLoad, p.Batch[:]).Scan(&completion, &tmpl, &completed)
			if isNoRows(err) {
				continue
			}
			if err != nil {
				return err
			}
			if completed != 0 {
				continue
			}
			t, err := decodeParams(tmpl)
			if err != nil {
				return fmt.Errorf("batch %s completion: %w", p.Batch, err)
			}
			if !p.Holds(t) {
				continue
			}
			p.Apply(t)
			enc, err := encodeParams(t)
			if err != nil {
				return fmt.Errorf("row %d: %w: %w", i, store.ErrInvalidParams, err)
			}
			res, err := w.tx.ExecContext(w.ctx, setTemplateSQL, enc, p.Batch[:])
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			ok[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reseal completions: %w", err)
	}
	return ok, nil
}
