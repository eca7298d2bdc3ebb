package sqlitestore

import (
	"context"
	"fmt"

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
