package pgstore

import (
	"fmt"
	"sync/atomic"
)

// The open claim: the plain claim of a claim whose kinds' limits do not
// bind (each kind may take the whole Limit, as every kind without a
// per-host Concurrency may: the runtime asks each for all its free slots).
//
// Several hosts claiming the same kinds all start their range scans at
// the oldest due rows. The plain claim (queries.go, claim) picks its rows
// first and locks them after, so a claim that runs beside another picks
// the rows the other holds, loses them, commits, and takes others in a
// second statement (claimLostSQL): measured with axbench multiprocess,
// four hosts of 25 workers lost rows in 80% of their claims, 21 of 24 on
// average, and the second rounds took two thirds of the claims' time, at
// 3.4 times the server CPU per job of one host of 100
// (docs/benchmarks/hosts-2026-12-06.txt).
//
// When no kind's limit binds, the claim order alone decides which rows a
// claim takes: the first Limit rows in claim order that no other claim
// holds. That is what PostgreSQL's LockRows does under a LIMIT, one row
// at a time, in the order below it, skipping the rows it cannot lock and
// locking no row past the last one it takes. So the open claim reads,
// per range, spare rows beyond those it could take, and locks in claim
// order up to Limit: rows other claims hold are stepped over in the same
// statement. It takes no row past a range's last candidate when that
// range has more (its edge, as claimLostSQL's list ends there), so it
// never takes a row while an earlier one, not read, is free; when it
// stops there short of its Limit, it reports the shortfall as lost, and
// the Store runs the second round as for the plain claim.
//
// spare adapts to what the claims beside it hold: each claim reports how
// many rows it stepped over (skipped), and the next reads half as many
// again beyond its limit (claimSpareFor). A host alone steps over none,
// and its spare decays to zero within a few claims: its claim then reads
// what the plain claim reads, limit + 1 rows per range.

// claimOpenSQL is the open claim. Its parameters are the plain claim's
// ($1 to $8) and $9, the spare rows each range reads beyond the kind's
// limit. Its columns are the plain claim's, with one more before the
// job's: now(), clock_timestamp(), the earliest candidate not taken
// (NextRunAt), each range's earliest due candidate not taken (the
// cursors' held), lost (how far short of Limit it stopped at an edge),
// skipped (the candidates it stepped over, held by other claims, up to
// its last row taken, or all it did not take when it took fewer than
// Limit), then the claimed job, or NULLs when it took none.
const claimOpenSQL = `WITH cand AS MATERIALIZED (
	SELECT c.id, k.kind, p.priority, c.run_at, least(k.lim, $3) + 1 + $9 AS cap,
	       c.run_at <= now() + $8::bigint * interval '1 microsecond' AS due,
	       ($6::bigint > 0 AND c.run_at <= now() - $6::bigint * interval '1 microsecond') AS aged
	FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS k(kind, lim, ord)
	CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
	CROSS JOIN LATERAL (
		SELECT * FROM (
			(SELECT j.id, j.run_at FROM {jobs} j
			WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority
			  AND j.state IN ` + claimableSQL + ` AND j.run_at <= now() + $8::bigint * interval '1 microsecond'
			  AND j.run_at >= coalesce(($7::timestamptz[])[(k.ord::int - 1) * 3 + p.priority], '-infinity')
			ORDER BY j.run_at
			LIMIT least(k.lim, $3) + 1 + $9)
			UNION ALL
			(SELECT j.id, j.run_at FROM {jobs} j
			WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority
			  AND j.state IN ` + claimableSQL + ` AND j.run_at > now() + $8::bigint * interval '1 microsecond'
			ORDER BY j.run_at
			LIMIT 1)
		) u
		LIMIT least(k.lim, $3) + 1 + $9
	) c
), ranked AS MATERIALIZED (
	SELECT id, kind, priority, run_at,
	       row_number() OVER (ORDER BY ` + plainClaimOrderSQL + `) AS pos,
	       count(*) OVER (PARTITION BY kind, priority) = cap
	         AND row_number() OVER (PARTITION BY kind, priority ORDER BY run_at DESC, id DESC) = 1 AS edge
	FROM cand WHERE due
), usable AS MATERIALIZED (
	SELECT id, pos FROM ranked
	WHERE pos <= coalesce((SELECT min(pos) FROM ranked WHERE edge), pos)
	ORDER BY pos
), locked1 AS MATERIALIZED (
	-- A probe of jobs by primary key per usable row, in usable's order
	-- (its CTE's sort, which the nested loop keeps), each locking its row
	-- or skipping it; the LIMIT stops the loop at the $3rd row locked.
	-- A join that the planner may order either way scanned all of jobs
	-- once per usable row when its statistics called jobs empty
	-- (the package doc: generic plans).
	SELECT u.id, u.pos, j.tid
	FROM usable u
	CROSS JOIN LATERAL (
		SELECT j.ctid AS tid FROM {jobs} j
		WHERE {onshard:j}j.id = u.id
		  AND (j.state IN ` + claimableSQL + `) IS TRUE AND j.run_at <= now() + $8::bigint * interval '1 microsecond'
		FOR UPDATE SKIP LOCKED
	) j
	LIMIT $3
), ` + claimTailSQL + `, took AS (
	SELECT count(*) AS n, max(pos) AS last FROM locked1
)
SELECT now(), clock_timestamp(), (SELECT run_at FROM next),
	ARRAY(SELECT h.run_at FROM unnest($1::text[]) WITH ORDINALITY AS k(kind, ord)
		CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
		LEFT JOIN held h ON h.kind = k.kind AND h.priority = p.priority
		ORDER BY k.ord, p.priority),
	(SELECT CASE WHEN t.n < $3 AND EXISTS (SELECT 1 FROM ranked WHERE edge) THEN $3 - t.n ELSE 0 END FROM took t),
	(SELECT (SELECT count(*) FROM usable u WHERE t.n < $3 OR u.pos <= t.last) - t.n FROM took t),
	c.*
FROM (SELECT 1) AS one LEFT JOIN claimed c ON true`

// maxClaimSpare bounds the spare rows an open claim reads per range: a
// claim that must step over more takes the rest in its second round,
// which reads more as it needs (claimLost).
const maxClaimSpare = 1024

// claimSpare is the spare rows the Store's next open claim reads per
// range beyond each kind's limit. Claims of the Store set it from what
// they stepped over; it is safe for concurrent use.
type claimSpare struct{ n atomic.Int64 }

// get returns the spare rows for the next open claim.
func (c *claimSpare) get() int64 { return c.n.Load() }

// observe records what an open claim that read spare rows stepped over
// (skipped) and how far short of its limit it stopped at an edge (lost).
func (c *claimSpare) observe(spare, skipped, lost int64) {
	c.n.Store(claimSpareFor(spare, skipped, lost))
}

// claimSpareFor returns the spare rows after a claim that read spare of
// them stepped over skipped rows and stopped lost short at an edge:
// enough for half as many again as it met (other claims' in flight vary
// claim to claim), or, when it met fewer, a quarter less than it read,
// so that a host whose neighbours stopped reads its plain limit again
// within a few claims. At most maxClaimSpare.
func claimSpareFor(spare, skipped, lost int64) int64 {
	met := max(skipped, 0) + max(lost, 0)
	return min(max(met+met/2, spare*3/4), maxClaimSpare)
}

// The claim of one kind: when a claim asks for one kind, claim order is
// each priority's range in run_at order, one range after the other, which
// is the order jobs_claim_idx gives them in, unless priority aging mixes
// the ranges (below). The statement then needs no candidates at all:
// under its LIMIT, a LockRows over each range's index scan locks rows one
// at a time in that order, steps over those other claims hold (and those
// other claims took since its snapshot, which no longer pass its
// conditions), and stops at the limit, scanning the next range only when
// the one before ran out. It never loses a row, so it never needs a
// second round, and it reads what it takes plus the rows other claims
// hold in front of it. What is left (NextRunAt, each range's cursor) is
// each range's first row it did not take, one short index scan each.
//
// Aging (ClaimParams.AgeAfter) puts the jobs due for AgeAfter first,
// oldest first whatever their priority. That reorders the ranges only
// when an aged job waits in a range behind another range with due jobs:
// an aged job of priority 2 while jobs of priority 1 are due, or one of
// priority 3 while jobs of priority 1 or 2 are. Otherwise the aged jobs
// are the oldest of the first range with due jobs, or of the only one,
// and come first in the ranges' order as well. So the statement first
// asks that (mixed: up to five one-row index probes, stopping at the
// first that decides it). When aging mixes the ranges, it takes nothing
// and says so (claimAgedMixed in its lost column), and the Store makes
// the open claim instead, which sorts its candidates in claim order: one
// more round trip, only while lower priorities' jobs have waited for
// AgeAfter behind higher ones, and for one claim of the kind a second
// (agedmixed.go: the claims between make the open claim at once). (A
// statement that merged the ranges in run_at order and locked as it went
// would need PostgreSQL to merge LockRows outputs, which it does not: it
// sorts, reading every aged row.)
// Measured with axbench multiprocess at the default aging, against the
// open claim every claim was before: three hosts of 100 workers and four
// of 25 each ran 1.36 times the jobs/s in runs of 1.5 million jobs
// (1.56–1.76 times in short runs; docs/performance.md, "The claim of one
// kind applies aging").

// claimAgedMixed is the lost column of a claim of one kind that took
// nothing because priority aging mixes its priorities' ranges
// (claimOneKindSQL); the Store then makes the open claim instead.
const claimAgedMixed = -1

// claimOneKindSQL is the claim of one kind. $1 is the kind, $2 how many
// jobs it may take (the smaller of its limit and the claim's), $3 the
// ranges' lower bounds (claim cursors, cursor.go: priorities 1 to 3),
// $4 the owner, $5 the lease in µs, $6 the claim window (ClaimParams.Ahead)
// in µs, $7 the priority aging bound (ClaimParams.AgeAfter) in µs, 0 for
// none. Its columns are the plain claim's (queries.go, claim), lost 0,
// or claimAgedMixed when aging mixes the ranges (it then takes nothing).
//
// It updates the rows its locking scans hold by their ctid, which those
// scans return, instead of by primary key: a TID scan in place of one
// jobs_pkey descent per row and a recheck of each row against the array.
// A row that another transaction wrote after the statement's snapshot
// and left claimable (an operator's UPDATE, say) is locked in its newest
// version, which the snapshot does not see: the TID scan skips it, and
// it stays claimable when the claim commits, as if another claim had
// held it. So what is left (NextRunAt, the cursors) is read past the
// rows claimed, not the rows locked, and such a row is the next due.
var claimOneKindSQL = `WITH mixed AS MATERIALIZED (
	SELECT $7::bigint > 0 AND (
		(` + claimOneAgedSQL("2") + ` AND ` + claimOneDueSQL("1") + `)
		OR (` + claimOneAgedSQL("3") + ` AND (` + claimOneDueSQL("1") + ` OR ` + claimOneDueSQL("2") + `))
	) AS yes
), locked1 AS MATERIALIZED (
	SELECT l.id, l.ctid FROM (` + claimOneRangeSQL("1") + `
		UNION ALL` + claimOneRangeSQL("2") + `
		UNION ALL` + claimOneRangeSQL("3") + `
	) l
	LIMIT $2
), claimed AS (
	-- No state test: locked1 checked it on the rows it holds. By ctid,
	-- not id: see claimOneKindSQL's comment.
	` + plainClaimSetSQL + `
	WHERE {routed:j}j.ctid = ANY (ARRAY(SELECT ctid FROM locked1))
	RETURNING {jcols}
), left1 AS MATERIALIZED (
	SELECT p.priority, n.run_at FROM unnest('{1,2,3}'::smallint[]) AS p(priority)
	LEFT JOIN LATERAL (
		SELECT j.run_at FROM {jobs} j
		WHERE {onshard:j}j.kind = $1::text AND j.priority = p.priority AND j.state IN ` + claimableSQL + `
		  AND j.run_at >= coalesce(($3::timestamptz[])[p.priority], '-infinity')
		  AND j.id NOT IN (SELECT id FROM claimed) -- a hashed subplan
		ORDER BY j.run_at
		LIMIT 1
	) n ON true
)
SELECT now(), clock_timestamp(), (SELECT min(run_at) FROM left1),
	ARRAY(SELECT CASE WHEN run_at <= now() + $6::bigint * interval '1 microsecond' THEN run_at END
		FROM left1 ORDER BY priority),
	CASE WHEN (SELECT yes FROM mixed) THEN ` + fmt.Sprint(claimAgedMixed) + ` ELSE 0 END::bigint,
	c.*
FROM (SELECT 1) AS one LEFT JOIN claimed c ON true`

// claimOneAgedSQL is claimOneKindSQL's test for a job of priority p due
// for the aging bound ($7) in its range.
func claimOneAgedSQL(p string) string {
	return claimOneProbeSQL(p, `now() - $7::bigint * interval '1 microsecond'`)
}

// claimOneDueBoundSQL is the latest run_at claimOneKindSQL takes: due
// within the claim window ($6).
const claimOneDueBoundSQL = `now() + $6::bigint * interval '1 microsecond'`

// claimOneDueSQL is claimOneKindSQL's test for a due job of priority p
// in its range.
func claimOneDueSQL(p string) string {
	return claimOneProbeSQL(p, claimOneDueBoundSQL)
}

// claimOneProbeSQL tests for a claimable job of priority p in its range
// with run_at at or before upTo.
func claimOneProbeSQL(p, upTo string) string {
	return `EXISTS (SELECT 1 FROM {jobs} j
			WHERE ` + claimOneRangeWhereSQL(p, upTo) + `)`
}

// claimOneRangeWhereSQL is the condition of claimOneKindSQL's range of
// priority p (kind $1, from its cursor in $3) up to run_at upTo: the
// probes and the locking scans read the same rows of jobs_claim_idx.
func claimOneRangeWhereSQL(p, upTo string) string {
	return `{onshard:j}j.kind = $1::text AND j.priority = ` + p + `
			  AND j.state IN ` + claimableSQL + ` AND j.run_at <= ` + upTo + `
			  AND j.run_at >= coalesce(($3::timestamptz[])[` + p + `], '-infinity')`
}

// claimOneRangeSQL is the locking scan of claimOneKindSQL's range of
// priority p.
func claimOneRangeSQL(p string) string {
	return `
		SELECT * FROM (SELECT j.id, j.ctid FROM {jobs} j
			WHERE ` + claimOneRangeWhereSQL(p, claimOneDueBoundSQL) + `
			  AND NOT (SELECT yes FROM mixed)
			ORDER BY j.run_at
			LIMIT $2
			FOR UPDATE OF j SKIP LOCKED) p` + p
}
