package sqlitestore

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
)

// bulkChunk is how many candidate rows Bulk reads at a time.
const bulkChunk = 256

// Bulk applies params.Op, in one transaction, to at most params.Limit jobs
// matching params.Filter to which it applies, oldest (lowest ID) first,
// and returns how many it changed; see store.BulkController and the BulkOp
// constants for which jobs each operation changes and how (the
// transitions are Control's: a run-now of a job whose unique key another
// job took meanwhile is left alone). Jobs made due notify subscribers,
// once per kind. Invalid params fail with an error wrapping
// store.ErrInvalidParams and change nothing.
//
// Candidates are read in ID order, in chunks, with the filter and the
// operation's states in the query, so the call reads about as many rows as
// it changes, plus those the filter's other terms reject.
func (s *Store) Bulk(ctx context.Context, params *store.BulkParams) (int, error) {
	if params == nil {
		return 0, fmt.Errorf("bulk: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("bulk %s: %w", params.Op, err)
	}
	where, args := filterSQL(&params.Filter)
	switch params.Op {
	case store.BulkRunNow:
		where += ` AND (state IN ('paused', 'dead', 'cancelled') OR (state IN ` + claimableSQL + ` AND run_at > ?))`
	case store.BulkCancel:
		where += ` AND (state IN ('scheduled', 'retrying', 'paused') OR (state = 'running' AND cancel_requested = 0))`
	case store.BulkDelete:
		where += ` AND state IN ` + finalSQL
	}
	changed := 0
	err := s.write(ctx, func(w *wtx) error {
		changed = 0
		qargs := args
		if params.Op == store.BulkRunNow {
			qargs = append(qargs[:len(qargs):len(qargs)], toUS(w.now))
		}
		after := []byte{}
		for changed < params.Limit {
			text := `SELECT ` + lightCols + ` FROM jobs WHERE ` + where + ` AND id > ? ORDER BY id LIMIT ?`
			js, err := loadAll(w.tx.QueryContext(w.ctx, text, append(qargs[:len(qargs):len(qargs)], after, bulkChunk)...))
			if err != nil {
				return err
			}
			for _, j := range js {
				ok, err := w.bulkOne(j, params.Op)
				if err != nil {
					return err
				}
				if ok {
					changed++
					if changed == params.Limit {
						return nil
					}
				}
			}
			if len(js) < bulkChunk {
				return nil
			}
			after = js[len(js)-1].rec.ID[:]
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bulk %s: %w", params.Op, err)
	}
	return changed, nil
}

// bulkOne applies op to j, a candidate, and reports whether it changed.
func (w *wtx) bulkOne(j *jobRow, op store.BulkOp) (bool, error) {
	switch op {
	case store.BulkRunNow:
		changed, err := w.control(j, store.OpRunNow)
		if err != nil && isKeyHeld(err) {
			return false, nil // its unique key was taken meanwhile: left alone
		}
		return changed, err
	case store.BulkCancel:
		return w.control(j, store.OpCancel)
	default:
		_, err := w.exec(qDeleteSeq, j.seq)
		return err == nil, err
	}
}
