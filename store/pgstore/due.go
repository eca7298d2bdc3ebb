package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/axsched/ax/store"
)

var _ store.DueInspector = (*Store)(nil)

// oldestDueSQL is a loose index scan of jobs_claim_idx (kind, priority,
// run_at) WHERE state IN ('scheduled', 'retrying'): the recursive part
// jumps from one kind to the next (one index probe each, however many jobs
// a kind has), then, per kind, one probe per priority reads its earliest
// run_at. The cost grows with the number of kinds, not with the backlog,
// so metrics collectors can call it at every scrape. Paused, running and
// final jobs are not in the index.
const oldestDueSQL = `WITH RECURSIVE kinds(kind) AS (
	(SELECT kind FROM {jobs} WHERE {onshard}state IN ` + claimableSQL + ` ORDER BY kind LIMIT 1)
	UNION ALL
	SELECT (SELECT j.kind FROM {jobs} j
	        WHERE {onshard:j}j.state IN ` + claimableSQL + ` AND j.kind > k.kind
	        ORDER BY j.kind LIMIT 1)
	FROM kinds k WHERE k.kind IS NOT NULL
)
SELECT now(), k.kind, o.run_at
FROM (SELECT 1) AS one
LEFT JOIN kinds k ON k.kind IS NOT NULL
LEFT JOIN LATERAL (
	SELECT min(e.run_at) AS run_at
	FROM unnest('{1,2,3}'::smallint[]) AS p(priority)
	CROSS JOIN LATERAL (
		SELECT j.run_at FROM {jobs} j
		WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority AND j.state IN ` + claimableSQL + `
		ORDER BY j.run_at LIMIT 1
	) e
) o ON true
ORDER BY k.kind COLLATE "C"`

// OldestDue returns, per kind, the earliest run_at among its scheduled and
// retrying jobs due at the database's now(), in one statement that probes
// the claim index a few times per kind; see store.DueInspector. Kinds are
// ordered in byte order.
func (s *Store) OldestDue(ctx context.Context) (*store.DueReport, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, s.sql(oldestDueSQL))
	rep := &store.DueReport{Kinds: []store.KindDue{}}
	var (
		kind  *string
		runAt pgtype.Timestamptz
	)
	_, err := pgx.ForEachRow(rows, []any{&rep.Now, &kind, &runAt}, func() error {
		if kind != nil && runAt.Valid && !runAt.Time.After(rep.Now) {
			rep.Kinds = append(rep.Kinds, store.KindDue{Kind: *kind, OldestRunAt: runAt.Time})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: oldest due jobs: %w", err)
	}
	return rep, nil
}
