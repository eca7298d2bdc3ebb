package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// auditTimeout bounds one cursor audit: a server that takes longer is in
// trouble, and the next audit comes auditEvery later.
const auditTimeout = time.Minute

// cursorAuditSQL finds, for each range ($1 kind, $2 priority) below its
// cursor ($3), the earliest claimable job: one descent of jobs_claim_idx
// per range, stepping over the entries below the cursor, as a claim
// without cursors would.
const cursorAuditSQL = `SELECT r.kind, x.run_at
FROM unnest($1::text[], $2::smallint[], $3::timestamptz[]) AS r(kind, priority, below)
CROSS JOIN LATERAL (
	SELECT j.run_at FROM {jobs} j
	WHERE j.kind = r.kind AND j.priority = r.priority
	  AND j.state IN ` + claimableSQL + ` AND j.run_at < r.below
	ORDER BY j.run_at
	LIMIT 1
) x`

// auditCursors audits, in a goroutine of its own, the ranges of kinds
// below the cursors from (begin's, in its order), and lowers a kind's
// cursors to the earliest claimable job it finds there, as a notification
// would have. One audit runs at a time; Close waits for it. An audit that
// fails is logged nowhere and tried again auditEvery later: it is a
// safety net, and the claims go on meanwhile.
func (s *Store) auditCursors(kinds []string, from []pgtype.Timestamptz) {
	var (
		names []string
		prios []int16
		below []time.Time
	)
	for i, k := range kinds {
		for p := range 3 {
			if b := from[3*i+p]; b.Valid {
				names, prios, below = append(names, k), append(prios, int16(p+1)), append(below, b.Time)
			}
		}
	}
	if len(names) == 0 {
		return // every range is scanned whole already
	}
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.closed.Load() || s.auditing {
		return
	}
	s.auditing = true
	s.audits.Add(1)
	go func() {
		defer s.audits.Done()
		defer func() {
			s.lmu.Lock()
			s.auditing = false
			s.lmu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(s.life, auditTimeout)
		defer cancel()
		rows, _ := s.pool.Query(ctx, s.q.cursorAudit, names, prios, below)
		var (
			kind  string
			runAt time.Time
		)
		_, _ = pgx.ForEachRow(rows, []any{&kind, &runAt}, func() error {
			s.cursors.lower(kind, runAt)
			return nil
		})
	}()
}
