package pgstore

import (
	"context"
	"fmt"
	"slices"
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
// is a walk, one row at a time, in claim order. cand takes, as the first
// round does, each (kind, priority) range's first rows in run_at order,
// here as many as the kind could take plus $10 more to step over; list
// puts them in claim order. Each step of the recursive CTE takes the
// list's next row and, if its kind is below its limit, tries its row lock
// (SKIP LOCKED, re-checking that the row is claimable and due): one
// primary-key probe per step, none for a kind at its limit. The walk
// stops when the claim has all it may take or the list ends.
//
// A range that filled its candidates may have more rows, which could come
// before later rows of the list: the list ends at the first such range's
// last candidate, and the second column (more) says that the walk
// reached that end short of the claim's limit, with room left for a kind
// whose range filled: claimLost then runs it again with more rows to step
// over (the rows other claims still hold come first again; those this
// round took are running).
//
// The candidates are fetched in one range scan each, as the first round's:
// a walk that found each range's next row with a descent per step sorted
// the rows sharing a run_at on every step (a batch insert shares one), and
// took 3 s to step over 700 held rows.
//
// A round inside the first statement could not do this: it picks its rows
// before it locks any, and one that locks first and picks after would hold
// locks on rows it does not take, which a claim beside it would skip
// (TestClaimStepsOverAHeldClaim).
// plainClaimSetSQL starts the jobs j a plain claim took (both rounds:
// claimSQL's and claimLostSQL's) for owner $4, leased for $5 µs.
const plainClaimSetSQL = `UPDATE {jobs} j SET
		state = 'running',
		owner = $4,
		lease_token = {token},
		attempt = j.attempt + 1,
		fence = j.fence + 1,
		lease_expires_at = now() + $5::bigint * interval '1 microsecond',
		attempted_at = greatest(now(), j.run_at)`

const claimLostSQL = `WITH RECURSIVE cand AS MATERIALIZED (
	SELECT c.id, k.ord, p.priority, c.run_at,
	       ($6::bigint > 0 AND c.run_at <= $9::timestamptz - $6::bigint * interval '1 microsecond') AS aged,
	       count(*) OVER (PARTITION BY k.ord, p.priority) = least(k.lim, $3) + $10 AS filled,
	       row_number() OVER (PARTITION BY k.ord, p.priority ORDER BY c.run_at DESC, c.id DESC) = 1 AS tail
	FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS k(kind, lim, ord)
	CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
	CROSS JOIN LATERAL (
		SELECT j.id, j.run_at FROM {jobs} j
		WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority
		  AND j.state IN ` + claimableSQL + ` AND j.run_at <= $9::timestamptz + $8::bigint * interval '1 microsecond'
		  AND j.run_at >= coalesce(($7::timestamptz[])[(k.ord::int - 1) * 3 + p.priority], '-infinity')
		ORDER BY j.run_at
		LIMIT least(k.lim, $3) + $10
	) c
	WHERE k.lim > 0
), ordered AS MATERIALIZED (
	SELECT id, ord, filled AND tail AS edge, row_number() OVER (ORDER BY ` + plainClaimOrderSQL + `) AS pos FROM cand
), list AS MATERIALIZED (
	SELECT coalesce(array_agg(o.id ORDER BY o.pos), '{}') AS ids, coalesce(array_agg(o.ord::int ORDER BY o.pos), '{}') AS ords,
	       e.pos IS NOT NULL AS cut
	FROM (SELECT min(pos) AS pos FROM ordered WHERE edge) e
	LEFT JOIN ordered o ON o.pos <= coalesce(e.pos, o.pos)
	GROUP BY e.pos
), walk AS (
	SELECT 0 AS i, 0 AS taken, array_fill(0, ARRAY[cardinality($1::text[])]) AS counts, NULL::uuid AS id, NULL::tid AS tid
	UNION ALL
	SELECT w.i + 1, w.taken + (l.id IS NOT NULL)::int,
		CASE WHEN l.id IS NULL THEN w.counts
		ELSE w.counts[:x.ords[w.i + 1] - 1] || (w.counts[x.ords[w.i + 1]] + 1) || w.counts[x.ords[w.i + 1] + 1:] END,
		l.id, l.tid
	FROM walk w
	CROSS JOIN list x
	LEFT JOIN LATERAL (
		SELECT j.id, j.ctid AS tid FROM {jobs} j
		WHERE {onshard:j}j.id = x.ids[w.i + 1] AND w.counts[x.ords[w.i + 1]] < ($2::int[])[x.ords[w.i + 1]]
		  AND (j.state IN ` + claimableSQL + `) IS TRUE
		  AND j.run_at <= $9::timestamptz + $8::bigint * interval '1 microsecond'
		FOR UPDATE SKIP LOCKED
	) l ON true
	WHERE w.i < cardinality(x.ids) AND w.taken < $3
), claimed AS (
	-- No state test: the walk checked it on the rows it holds. By tuple
	-- ID: on a Citus shard, {routed:j} (placement.go).
	` + plainClaimSetSQL + `
	WHERE {routed:j}j.ctid = ANY (ARRAY(SELECT tid FROM walk WHERE tid IS NOT NULL))
	RETURNING {jcols}
)
SELECT clock_timestamp(),
	(SELECT x.cut AND w.i = cardinality(x.ids) AND w.taken < $3
		AND EXISTS (SELECT 1 FROM cand c WHERE c.filled AND c.tail AND w.counts[c.ord] < ($2::int[])[c.ord])
	FROM list x, (SELECT * FROM walk ORDER BY i DESC LIMIT 1) w),
	c.*
FROM (SELECT 1) AS one LEFT JOIN claimed c ON true`

// claimLostRounds bounds how many times claimLost runs claimLostSQL for
// one claim. The first run reads, in each range, claimLostFirst or as
// many rows as the first round lost, whichever is more, beyond what the
// kind could take, to step over the rows other claims hold; each next run
// claimLostGrowth times more. 64 more index entries per range cost about
// as much as a round trip; four times what the first round lost made
// TestConcurrentClaimsEachJobOnce (8 claimers of 100) slower, each run
// reading and sorting thousands of rows.
const (
	claimLostRounds = 4
	claimLostFirst  = 64
	claimLostGrowth = 4
)

// claimLost runs the claim's second round (claimLostSQL) for a claim
// whose first round, already committed into res, lost lost of its first
// choices to other claims, and adds what it takes to res, in claim order.
// kinds, limits and from are the first round's. It runs in a transaction
// of its own, after the first committed: the first round's jobs are
// running by then, so the walk passes them by. When the walk ran out of
// candidates short of the claim's limits, it runs again with more
// (claimLostRounds).
//
// An error leaves res as the rounds before made it: their jobs are claimed
// and committed, and dropping them for a later round's failure would
// leave them to wait for their leases to expire. The jobs the failed round
// would have taken stay claimable for the next claim; a commit that
// failed drops those it took, as commitClaim does.
func (s *Store) claimLost(ctx context.Context, res *store.ClaimResult, kinds []string, limits []int32,
	params *store.ClaimParams, from []pgtype.Timestamptz, lost int64) {
	taken := make(map[string]int32, len(kinds))
	for _, j := range res.Jobs {
		taken[j.Kind]++
	}
	extra := int32(min(max(claimLostFirst, lost), 1<<20))
	for range claimLostRounds {
		total := int32(min(params.Limit, 1<<30)) - int32(len(res.Jobs))
		left := make([]int32, len(kinds))
		room := false
		for i, k := range kinds {
			left[i] = max(limits[i]-taken[k], 0)
			room = room || left[i] > 0
		}
		if total <= 0 || !room {
			return
		}
		b := &pgx.Batch{}
		if s.opts.asyncCommits {
			b.Queue(claimPlanAsyncSQL)
		} else {
			b.Queue(claimPlanSQL)
		}
		b.Queue(s.q.claimLost, kinds, left, total, params.Owner, micros(params.LeaseDuration),
			micros(params.AgeAfter), from, micros(params.Ahead), res.Now, extra)
		jobs, clock, more, err := readClaimLost(s.conn(ctx).SendBatch(ctx, b))
		if err != nil {
			return
		}
		if clock.After(res.Clock) {
			res.Clock = clock
		}
		for _, j := range jobs {
			taken[j.Kind]++
		}
		res.Jobs = append(res.Jobs, jobs...)
		sortClaimed(res.Jobs, res.Now, params.AgeAfter)
		if !more {
			return
		}
		extra = min(extra*claimLostGrowth, 1<<20)
	}
}

// readClaimLost reads and ends the batch claimLost sent: the jobs it
// claimed, the latest clock_timestamp() of its rows and whether the walk
// ran out of candidates short of the limits (more), or an error, with no
// jobs, when a statement or the commit failed.
func readClaimLost(br pgx.BatchResults) (jobs []*store.JobRecord, clock time.Time, more bool, err error) {
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			jobs, err = nil, fmt.Errorf("pgstore: claim lost rows: commit: %w", cerr)
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, clock, false, fmt.Errorf("pgstore: claim lost rows: plan settings: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, clock, false, fmt.Errorf("pgstore: claim lost rows: %w", err)
	}
	defer rows.Close()
	const jobCol = 2
	var (
		js      jobScan
		at      time.Time
		m       *bool
		dest    = append([]any{&at, &m}, js.dest()...)
		jobDest = slices.Clone(dest[jobCol:])
	)
	for rows.Next() {
		js = jobScan{}
		if rows.RawValues()[jobCol] == nil { // nothing claimed: only clock and more
			clear(dest[jobCol:])
		} else {
			copy(dest[jobCol:], jobDest)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, clock, false, fmt.Errorf("pgstore: claim lost rows: %w", err)
		}
		if at.After(clock) {
			clock = at
		}
		more = m != nil && *m
		if dest[jobCol] == nil {
			continue
		}
		j, err := js.record()
		if err != nil {
			return nil, clock, false, fmt.Errorf("pgstore: claim lost rows: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, clock, false, fmt.Errorf("pgstore: claim lost rows: %w", err)
	}
	return jobs, clock, more, nil
}
