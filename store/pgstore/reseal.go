package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/axsched/ax/store"
	"github.com/jackc/pgx/v5"
)

var _ store.Resealer = (*Store)(nil)

// resealSQL rewrites one job's sealed values in table {t} while its
// payload and result are still the old ones, text for text (both are
// json columns, kept byte for byte).
const resealSQL = `UPDATE {t} SET payload = $1::json,
	result = CASE WHEN $2::text IS NULL THEN result ELSE $2::json END,
	metadata = CASE WHEN $3 THEN $4::jsonb ELSE metadata END,
	follow_ups = CASE WHEN $5 THEN $6::json ELSE follow_ups END
WHERE id = $7 AND payload::text = $8 AND result::text IS NOT DISTINCT FROM $9`

// Reseal implements store.Resealer: one pipelined batch, the hot table
// first, then the history (a job is in one of them; one that Archive
// moves meanwhile is reported not applied, and a later pass takes it).
func (s *Store) Reseal(ctx context.Context, rows []store.ResealParams) ([]bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: reseal row %d: %w", i, err)
		}
	}
	ok := make([]bool, len(rows))
	if len(rows) == 0 {
		return ok, nil
	}
	var b pgx.Batch
	for _, t := range []string{"{jobs}", "{history}"} {
		q := s.sql(strings.Replace(resealSQL, "{t}", t, 1))
		for i, p := range rows {
			var result, oldResult *string
			if p.OldResult != nil {
				r, o := string(p.Result), string(p.OldResult)
				result, oldResult = &r, &o
			}
			md, err := metadataJSON(p.Metadata)
			if err != nil {
				return nil, fmt.Errorf("pgstore: reseal row %d: metadata: %w", i, err)
			}
			fus, err := encodeFollowUps(p.FollowUps)
			if err != nil {
				return nil, fmt.Errorf("pgstore: reseal row %d: %w", i, err)
			}
			b.Queue(q, string(p.Payload), result, p.Metadata != nil, nullableBytes(md),
				p.FollowUps != nil, nullableBytes(fus), p.ID, string(p.OldPayload), oldResult)
		}
	}
	res := s.pool.SendBatch(ctx, &b)
	for range 2 {
		for i := range rows {
			tag, err := res.Exec()
			if err != nil {
				_ = res.Close()
				return nil, fmt.Errorf("pgstore: reseal: %w", err)
			}
			ok[i] = ok[i] || tag.RowsAffected() == 1
		}
	}
	if err := res.Close(); err != nil {
		return nil, fmt.Errorf("pgstore: reseal: %w", err)
	}
	return ok, nil
}

// nullableBytes is b as a text parameter, or NULL for nil.
func nullableBytes(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}
