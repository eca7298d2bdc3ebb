package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/axsched/ax/store"
)

// claimLostSQL is the plain claim's second round, run only when the first
// (queries.go, claim) lost some of its first choices to other claims: it
// takes the next-best due rows in the first round's order
// (plainClaimOrderSQL, with due-ness and aging at the first round's now(),
// $9), up to what each kind ($2) and the claim ($3) have left, from each
// range's cursor ($7), locking no row it does not take.
//
// Which rows other claims hold is known only by trying to lock them, and a
// claim may lock only the rows it takes, within its limits: so the round
// is a walk, one row at a time, in claim order. heads holds, for each
// (kind, priority) range in the cursors' layout, its first due row in
// (run_at, id) order, from the range's cursor. Each step of the recursive
// CTE picks the best head in claim order among the kinds not at their
// limit, tries its row lock (SKIP LOCKED, re-checking that the row is
// claimable and due), and moves that range's head to its next row (ties
// of run_at go by id, as in the claim order). Each range is in claim
// order by itself (its aged rows are its oldest), so merging the heads
// walks all ranges in claim order. The walk stops when the claim has all
// it may take or no range has a row left: the rows other claims hold are
// stepped over however many they are, at three index probes each (the
// lock, and rangeRowSQL's two descents for the next row).
//
// A round inside the first statement could not do this: it picks its rows
// before it locks any, and one that locks first and picks after would hold
// locks on rows it does not take, which a claim beside it would skip
// (TestClaimStepsOverAHeldClaim).
var claimLostSQL = `WITH RECURSIVE heads AS MATERIALIZED (
	SELECT array_agg(h.run_at ORDER BY k.ord, p.priority) AS hr, array_agg(h.id ORDER BY k.ord, p.priority) AS hi
	FROM unnest($1::text[]) WITH ORDINALITY AS k(kind, ord)
	CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
	LEFT JOIN LATERAL (` + rangeRowSQL("k.kind", "p.priority",
	"$.run_at >= coalesce(($7::timestamptz[])[(k.ord::int - 1) * 3 + p.priority], '-infinity')") + `
	) h ON true
), walk AS (
	SELECT 0 AS taken, array_fill(0, ARRAY[cardinality($1::text[])]) AS counts, hr, hi, NULL::uuid AS id FROM heads
	UNION ALL
	SELECT w.taken + (l.id IS NOT NULL)::int,
		CASE WHEN l.id IS NULL THEN w.counts ELSE w.counts[:b.k - 1] || (w.counts[b.k] + 1) || w.counts[b.k + 1:] END,
		w.hr[:b.i - 1] || ARRAY[n.run_at] || w.hr[b.i + 1:],
		w.hi[:b.i - 1] || ARRAY[n.id] || w.hi[b.i + 1:],
		l.id
	FROM walk w
	CROSS JOIN LATERAL (
		SELECT h.i, h.k, h.priority FROM (
			SELECT i, (i - 1) / 3 + 1 AS k, (i - 1) % 3 + 1 AS priority, w.hr[i] AS run_at, w.hi[i] AS id,
			       ($6::bigint > 0 AND w.hr[i] <= $9::timestamptz - $6::bigint * interval '1 microsecond') AS aged
			FROM generate_subscripts(w.hr, 1) AS i
		) h
		WHERE h.run_at IS NOT NULL AND w.counts[h.k] < ($2::int[])[h.k]
		ORDER BY ` + plainClaimOrderSQL + `
		LIMIT 1
	) b
	LEFT JOIN LATERAL (
		SELECT j.id FROM {jobs} j
		WHERE j.id = w.hi[b.i] AND (j.state IN ` + claimableSQL + `) IS TRUE
		  AND j.run_at <= $9::timestamptz + $8::bigint * interval '1 microsecond'
		FOR UPDATE SKIP LOCKED
	) l ON true
	LEFT JOIN LATERAL (` + rangeRowSQL("($1::text[])[b.k]", "b.priority",
	"$.run_at >= w.hr[b.i] AND ($.run_at > w.hr[b.i] OR $.id > w.hi[b.i])") + `
	) n ON true
	WHERE w.taken < $3
), claimed AS (
	-- No state test: the walk checked it on the rows it holds.
	UPDATE {jobs} j SET
		state = 'running',
		owner = $4,
		lease_token = gen_random_uuid(),
		attempt = j.attempt + 1,
		fence = j.fence + 1,
		lease_expires_at = now() + $5::bigint * interval '1 microsecond',
		attempted_at = greatest(now(), j.run_at)
	WHERE j.id = ANY (ARRAY(SELECT id FROM walk WHERE id IS NOT NULL))
	RETURNING {jcols}
)
SELECT clock_timestamp(), c.* FROM claimed c`

// rangeRowSQL is a subquery returning the first due claimable row (id,
// run_at) of the range kind, priority of jobs_claim_idx, in (run_at, id)
// order, among the rows for which after holds, a condition on the alias
// "$". jobs_claim_idx ends with run_at: ordered by (run_at, id), a probe
// read and sorted the whole rest of its range (4,000,000 rows at 1,000
// held rows, TestGenericPlansAreLinear), so the first descent finds the
// earliest run_at, and the second the smallest id of the rows at that
// run_at, sorting only those.
func rangeRowSQL(kind, priority, after string) string {
	return `
		SELECT j.id, j.run_at FROM {jobs} j
		WHERE j.kind = ` + kind + ` AND j.priority = ` + priority + ` AND j.state IN ` + claimableSQL + `
		  AND j.run_at = (
			SELECT x.run_at FROM {jobs} x
			WHERE x.kind = ` + kind + ` AND x.priority = ` + priority + ` AND x.state IN ` + claimableSQL + `
			  AND x.run_at <= $9::timestamptz + $8::bigint * interval '1 microsecond'
			  AND ` + strings.ReplaceAll(after, "$.", "x.") + `
			ORDER BY x.run_at
			LIMIT 1)
		  AND ` + strings.ReplaceAll(after, "$.", "j.") + `
		ORDER BY j.id
		LIMIT 1`
}

// claimLost runs the claim's second round (claimLostSQL) for a claim
// whose first round, already committed into res, lost some of its first
// choices to other claims, and adds what it takes to res, in claim order.
// kinds, limits and from are the first round's. It runs in a transaction
// of its own, after the first committed: the first round's jobs are
// running by then, so the walk passes them by.
//
// An error leaves res as the first round made it: its jobs are claimed
// and committed, and dropping them for the second round's failure would
// leave them to wait for their leases to expire. The jobs the second round
// would have taken stay claimable for the next claim; a commit that
// failed drops those it took, as commitClaim does.
func (s *Store) claimLost(ctx context.Context, res *store.ClaimResult, kinds []string, limits []int32,
	params *store.ClaimParams, from []pgtype.Timestamptz) {
	total := int32(min(params.Limit, 1<<30)) - int32(len(res.Jobs))
	if total <= 0 {
		return
	}
	taken := make(map[string]int32, len(kinds))
	for _, j := range res.Jobs {
		taken[j.Kind]++
	}
	left := make([]int32, len(kinds))
	for i, k := range kinds {
		left[i] = max(limits[i]-taken[k], 0)
	}
	b := &pgx.Batch{}
	if s.opts.asyncCommits {
		b.Queue(claimPlanAsyncSQL)
	} else {
		b.Queue(claimPlanSQL)
	}
	b.Queue(s.q.claimLost, kinds, left, total, params.Owner, micros(params.LeaseDuration),
		micros(params.AgeAfter), from, micros(params.Ahead), res.Now)
	jobs, clock, err := s.readClaimLost(s.pool.SendBatch(ctx, b))
	if err != nil || len(jobs) == 0 {
		return
	}
	if clock.After(res.Clock) {
		res.Clock = clock
	}
	res.Jobs = append(res.Jobs, jobs...)
	sortClaimed(res.Jobs, res.Now, params.AgeAfter)
}

// readClaimLost reads and ends the batch claimLost sent: the jobs it
// claimed and the latest clock_timestamp() of their rows, or an error, with
// no jobs, when a statement or the commit failed.
func (s *Store) readClaimLost(br pgx.BatchResults) (jobs []*store.JobRecord, clock time.Time, err error) {
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			jobs, err = nil, fmt.Errorf("pgstore: claim lost rows: commit: %w", cerr)
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, clock, fmt.Errorf("pgstore: claim lost rows: plan settings: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, clock, fmt.Errorf("pgstore: claim lost rows: %w", err)
	}
	defer rows.Close()
	var (
		js    jobScan
		at    time.Time
		dest  = append([]any{&at}, js.dest()...)
		found []*store.JobRecord
	)
	for rows.Next() {
		js = jobScan{}
		if err := rows.Scan(dest...); err != nil {
			return nil, clock, fmt.Errorf("pgstore: claim lost rows: %w", err)
		}
		j, err := js.record()
		if err != nil {
			return nil, clock, fmt.Errorf("pgstore: claim lost rows: %w", err)
		}
		if at.After(clock) {
			clock = at
		}
		found = append(found, j)
	}
	if err := rows.Err(); err != nil {
		return nil, clock, fmt.Errorf("pgstore: claim lost rows: %w", err)
	}
	return found, clock, nil
}
