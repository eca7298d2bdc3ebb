package pgstore

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// flowQueries holds the flow-control SQL, with the schema's tables
// substituted: {jobs}, {flows}, {buckets} (partition rate buckets),
// {deltas} (pending count changes), {verdicts} (breaker verdicts recorded
// in callers' transactions), {pbreakers} (partition breakers) and
// {seqkinds}.
type flowQueries struct {
	kinds          string
	lockOne        string
	lockMany       string
	shareMany      string
	deleteFlow     string
	upsertFlow     string
	recountPending string
	notifyKinds    string
	states         string
	setBreaker     string
	claim          string
	next           string
	finish         string
	lockBreakers   string
	addVerdicts    string
	foldVerdicts   string
	clearVerdicts  string
	pending        string
	pendingAll     string
	addPending     string
	setKeys        string
	addSeqKinds    string
	sweepUnkeyed   string
	// Partition breakers (partitionbreaker.go).
	openPartBreakers string
	partBreakersOf   string
	writePartBreaker string
	listPartBreakers string
	pruneBreakers    string
}

// seqHeadSQL holds for a job j outside sequences, or first of the live
// jobs of its sequence in (scheduled_at, id) order with none of them
// running: the only job of a sequence that may start.
const seqHeadSQL = `(j.sequence_key IS NULL OR NOT EXISTS (
	SELECT 1 FROM {jobs} s
	WHERE s.kind = j.kind AND s.sequence_key = j.sequence_key
	  AND s.state IN ('scheduled', 'retrying', 'running', 'paused') AND s.id <> j.id
	  AND (s.state = 'running' OR (s.scheduled_at, s.id) < (j.scheduled_at, j.id))))`

// agedSQL is whether a job c is past the priority aging bound, and
// claimOrderSQL the claim order: aged jobs first, oldest first whatever
// their priority, then the others by priority and run_at.
const (
	agedSQL       = `($12::bigint > 0 AND c.run_at <= $11::timestamptz - $12::bigint * interval '1 microsecond')`
	claimOrderSQL = `c.aged DESC, CASE WHEN c.aged THEN 0 ELSE c.priority END, c.run_at, c.id`
)

// partAvailSQL is how many starts a partition's rate bucket b allows at
// $11: store.RateLimit.Available in SQL (burst k.pburst, one token per
// k.pint microseconds).
const partAvailSQL = `CASE WHEN b.tat IS NULL OR b.tat <= $11::timestamptz THEN k.pburst
	ELSE greatest(0, least(k.pburst, floor((extract(epoch FROM $11::timestamptz - b.tat) * 1000000
		+ k.pburst::numeric * k.pint) / k.pint)))::int END`

// partKeysSQL lists the partitions of kind k.kind that have claimable
// jobs: "" (jobs without a key, which jobs_partition_idx leaves out and
// jobs_unkeyed_idx holds: unkeyed.go), then every key found by skipping
// through jobs_partition_idx, one index probe per key rather than a read
// of every claimable job.
//
// Every read of one partition's jobs (here, in the claim and in next)
// says partition_key > ” beside its equality, or reads the partition ""
// through unkeyed: an equality with a key from another relation does not
// let the planner prove a partial index's predicate, and such a read
// walked jobs_claim_idx over every claimable job of the kind, a full
// partition's held backlog included (issue 40).
const partKeysSQL = `SELECT '' AS key
	UNION ALL (
	WITH RECURSIVE keys(key) AS (
		(SELECT j.partition_key FROM {jobs} j
		 WHERE j.kind = k.kind AND j.state IN ('scheduled', 'retrying') AND j.partition_key > ''
		 ORDER BY j.partition_key LIMIT 1)
		UNION ALL
		SELECT (SELECT j.partition_key FROM {jobs} j
		        WHERE j.kind = k.kind AND j.state IN ('scheduled', 'retrying') AND j.partition_key > keys.key
		          AND j.partition_key > ''
		        ORDER BY j.partition_key LIMIT 1)
		FROM keys WHERE keys.key IS NOT NULL
	)
	SELECT key FROM keys WHERE key IS NOT NULL)`

// kindAvailSQL is partAvailSQL for a kind's rate bucket f.rate_tat (burst
// k.rburst, one token per k.rint microseconds), read after the kind's row
// was locked: a claim in one round trip cuts its limit by it in SQL, a
// claim decided in Go passes a limit already cut the same way.
const kindAvailSQL = `CASE WHEN f.rate_tat IS NULL OR f.rate_tat <= $11::timestamptz THEN k.rburst
	ELSE greatest(0, least(k.rburst, floor((extract(epoch FROM $11::timestamptz - f.rate_tat) * 1000000
		+ k.rburst::numeric * k.rint) / k.rint)))::int END`

// pendingVerdictsSQL lists, for a locked flows row f, the verdicts that
// callers' transactions recorded for its kind (failed, in seq order) and
// their seqs, NULL when there are none (or the kind has no breaker: no
// lookup then).
const pendingVerdictsSQL = `CASE WHEN f.config -> 'breaker' IS NOT NULL THEN
		(SELECT array_agg(v.failed ORDER BY v.seq) FROM {verdicts} v WHERE v.kind = f.kind) END,
	CASE WHEN f.config -> 'breaker' IS NOT NULL THEN
		(SELECT array_agg(v.seq ORDER BY v.seq) FROM {verdicts} v WHERE v.kind = f.kind) END`

// partCandSQL is the flow claim's candidates of the partitions parts
// lists (pt) that which selects, read with partition condition cond:
// one branch for keyed partitions and one for the partition "", since a
// condition that says which index the partition's jobs are in (see
// partKeysSQL) must not depend on pt.key.
func partCandSQL(which, cond string) string {
	return `SELECT c.*, k.lim, pt.lim
	FROM parts pt JOIN k ON k.kind = pt.kind
	CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
	CROSS JOIN LATERAL (
		SELECT j.id, j.kind, j.partition_key, j.priority, j.run_at FROM {jobs} j
		WHERE j.kind = pt.kind AND ` + cond + ` AND j.priority = p.priority
		  AND j.state IN ('scheduled', 'retrying') AND j.run_at <= $11::timestamptz
		  AND ` + seqHeadSQL + `
		ORDER BY j.run_at
		LIMIT least(pt.lim, $8)
		FOR UPDATE SKIP LOCKED
	) c
	WHERE pt.lim > 0 AND ` + which
}

func buildFlowQueries(schema string) flowQueries {
	r := strings.NewReplacer(
		"{jobs}", pgx.Identifier{schema, "jobs"}.Sanitize(),
		"{history}", pgx.Identifier{schema, "jobs_history"}.Sanitize(),
		"{flows}", pgx.Identifier{schema, "flows"}.Sanitize(),
		"{buckets}", pgx.Identifier{schema, "flow_partition_buckets"}.Sanitize(),
		"{deltas}", pgx.Identifier{schema, "flow_pending_deltas"}.Sanitize(),
		"{seqkinds}", pgx.Identifier{schema, "flow_sequence_kinds"}.Sanitize(),
		"{verdicts}", pgx.Identifier{schema, "flow_breaker_verdicts"}.Sanitize(),
		"{pbreakers}", pgx.Identifier{schema, "flow_partition_breakers"}.Sanitize(),
		"{cols}", jobColumns, "{jcols}", prefixed("j"))
	q := flowQueries{
		// The cached list: kinds with settings (config) and kinds with
		// sequences (NULL).
		kinds: `SELECT kind, config FROM {flows} UNION ALL SELECT kind, NULL FROM {seqkinds}`,

		lockOne: `SELECT config, breaker, rate_tat FROM {flows} WHERE kind = $1 FOR UPDATE`,

		// The kinds whose settings hold claims back (anything but a
		// partition source and MaxPending), locked in kind order, as
		// every path locking several kinds does. Kinds with only a
		// MaxPending are not locked: their claims need not queue behind
		// their inserts.
		lockMany: `SELECT f.kind, f.config, f.breaker, f.rate_tat, ` + pendingVerdictsSQL + ` FROM {flows} f
WHERE f.kind = ANY($1::text[]) AND f.config - 'kind' - 'max_pending' - 'partition' <> '{}'::jsonb
ORDER BY f.kind FOR UPDATE OF f`,

		// shareMany is lockMany for a claim that writes none of the rows
		// (every kind's settings at most a breaker, which a claim in one
		// round trip only reads): such claims of one kind run side by
		// side, and a breaker's change still waits for them.
		shareMany: `SELECT f.kind, f.config, f.breaker, f.rate_tat, ` + pendingVerdictsSQL + ` FROM {flows} f
WHERE f.kind = ANY($1::text[]) AND f.config - 'kind' - 'max_pending' - 'partition' <> '{}'::jsonb
ORDER BY f.kind FOR SHARE OF f`,

		deleteFlow: `WITH b AS (DELETE FROM {buckets} WHERE kind = $1), d AS (DELETE FROM {deltas} WHERE kind = $1),
	v AS (DELETE FROM {verdicts} WHERE kind = $1), pb AS (DELETE FROM {pbreakers} WHERE kind = $1)
DELETE FROM {flows} WHERE kind = $1`,

		// $4: keep the breaker, $5: keep the rate bucket, $6: keep the
		// partition buckets, $7: keep the partition breakers.
		upsertFlow: `WITH b AS (DELETE FROM {buckets} WHERE kind = $1 AND NOT $6::bool),
	v AS (DELETE FROM {verdicts} WHERE kind = $1 AND NOT $4::bool),
	pb AS (DELETE FROM {pbreakers} WHERE kind = $1 AND NOT $7::bool)
INSERT INTO {flows} AS f (kind, config, declared_by, declared_at) VALUES ($1, $2, $3, now())
ON CONFLICT (kind) DO UPDATE SET
	config = excluded.config,
	declared_by = excluded.declared_by,
	declared_at = excluded.declared_at,
	breaker = CASE WHEN $4::bool THEN f.breaker ELSE '{}' END,
	rate_tat = CASE WHEN $5::bool THEN f.rate_tat END`,

		// MaxPending set on a kind that had none: its pending jobs are
		// marked (their state changes are counted from now on) and
		// counted once. Every CTE sees one snapshot, so the count and the
		// deltas deleted agree; deltas of transactions not yet committed
		// are neither seen nor deleted, and apply later on this count.
		recountPending: `WITH marked AS (
	UPDATE {jobs} SET pending_counted = true
	WHERE kind = $1 AND state IN ('scheduled', 'retrying') AND NOT pending_counted
	RETURNING 1
), cleared AS (DELETE FROM {deltas} WHERE kind = $1)
UPDATE {flows} SET pending = (SELECT count(*) FROM {jobs} WHERE kind = $1 AND state IN ('scheduled', 'retrying'))
WHERE kind = $1 AND (SELECT count(*) FROM marked) >= 0`,

		notifyKinds: `SELECT pg_notify($1, json_build_object('kind', k, 'run_at', clock_timestamp())::text)
FROM unnest($2::text[]) AS k`,

		states: `SELECT f.config, f.declared_by, f.declared_at, f.breaker, f.rate_tat,
	(SELECT count(*) FROM {jobs} j WHERE j.kind = f.kind AND j.state = 'running'), now(),
	CASE WHEN f.config -> 'partition_breaker' IS NOT NULL THEN (SELECT count(*) FROM {pbreakers} b
		WHERE b.kind = f.kind AND b.breaker ->> 'state' IN ('open', 'half_open')) ELSE 0 END
FROM {flows} f WHERE $1 = '' OR f.kind = $1 ORDER BY f.kind`,

		setBreaker: `UPDATE {flows} SET breaker = $2 WHERE kind = $1`,

		// The flow claim, run while the kinds' rows are locked. Per kind
		// (k): lim is what the caller, the rate bucket and the breaker
		// allow ($2), cut by the concurrency room ($3 − running). Kinds
		// with partition limits ($4) are read partition by partition
		// (parts: each key with claimable jobs, its room from
		// PartitionConcurrency and its rate bucket), the others priority
		// by priority, as the plain claim does, taking only the first
		// job of each sequence. The candidates are then cut per
		// partition, then per kind, then to the total ($8), in claim
		// order. $11 is the clock read once the locks were held (NULL:
		// ax.flow_now, the same clock kept in the transaction); $12 the
		// priority aging bound in microseconds (0: none). The same
		// statement draws on the rate buckets (store.RateLimit.Take: $13
		// the kind's interval in microseconds, 0 without a rate; the
		// partitions' from k) and, for kinds whose claim starts a probe,
		// stores the half-open breaker Go computed ($14, NULL: none).
		// $16: kinds with a breaker claimed without Go's decision, which
		// start nothing unless the breaker is closed with no verdict
		// waiting to be folded in (callers' transactions' verdicts).
		claim: `WITH k AS MATERIALIZED (
	SELECT k.kind, k.parted, k.pconc, k.pburst, k.pint,
		CASE WHEN k.gate AND (f.breaker ->> 'state' IN ('open', 'half_open')
			OR EXISTS (SELECT 1 FROM {verdicts} v WHERE v.kind = k.kind)) THEN 0
		ELSE least(
			CASE WHEN k.conc > 0 THEN least(k.lim, greatest(0, k.conc - (
				SELECT count(*) FROM {jobs} r WHERE r.kind = k.kind AND r.state = 'running'))::int)
			ELSE k.lim END,
			CASE WHEN k.rburst > 0 THEN ` + kindAvailSQL + ` ELSE k.lim END) END AS lim
	FROM unnest($1::text[], $2::int[], $3::int[], $4::bool[], $5::int[], $6::int[], $7::bigint[], $13::bigint[], $15::int[], $16::bool[])
		AS k(kind, lim, conc, parted, pconc, pburst, pint, rint, rburst, gate)
	LEFT JOIN {flows} f ON f.kind = k.kind
), parts AS MATERIALIZED (
	SELECT k.kind, p.key, least(k.lim,
		CASE WHEN k.pconc > 0 THEN greatest(0, k.pconc - (
			SELECT count(*) FROM {jobs} r WHERE r.kind = k.kind AND r.partition_key = p.key AND r.state = 'running'))::int
		ELSE k.lim END,
		CASE WHEN k.pburst > 0 THEN ` + partAvailSQL + ` ELSE k.lim END,
		CASE WHEN pb.mode = 0 THEN 0
			WHEN pb.mode = 1 THEN CASE WHEN EXISTS (SELECT 1 FROM {jobs} r
				WHERE r.kind = k.kind AND r.partition_key = p.key AND r.state = 'running') THEN 0 ELSE 1 END
			ELSE k.lim END) AS lim
	FROM k CROSS JOIN LATERAL (` + partKeysSQL + `) p
	LEFT JOIN {buckets} b ON b.kind = k.kind AND b.partition_key = p.key
	LEFT JOIN unnest($17::text[], $18::text[], $19::int[]) AS pb(kind, key, mode) ON pb.kind = k.kind AND pb.key = p.key
	WHERE k.parted AND k.lim > 0
), cand AS (
	SELECT c.*, k.lim AS klim, k.lim AS plim
	FROM k CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
	CROSS JOIN LATERAL (
		SELECT j.id, j.kind, j.partition_key, j.priority, j.run_at FROM {jobs} j
		WHERE j.kind = k.kind AND j.priority = p.priority
		  AND j.state IN ('scheduled', 'retrying') AND j.run_at <= $11::timestamptz
		  AND ` + seqHeadSQL + `
		ORDER BY j.run_at
		LIMIT least(k.lim, $8)
		FOR UPDATE SKIP LOCKED
	) c
	WHERE NOT k.parted AND k.lim > 0
	UNION ALL
	` + partCandSQL(`pt.key > ''`, `j.partition_key = pt.key AND j.partition_key > ''`) + `
	UNION ALL
	` + partCandSQL(`pt.key = ''`, `j.partition_key = '' AND j.unkeyed`) + `
), ordered AS (
	SELECT c.*, ` + agedSQL + ` AS aged FROM cand c
), picked AS MATERIALIZED (
	SELECT c.id FROM (
		SELECT x.*, row_number() OVER (PARTITION BY x.kind ORDER BY x.aged DESC,
			CASE WHEN x.aged THEN 0 ELSE x.priority END, x.run_at, x.id) AS kn
		FROM (
			SELECT o.*, row_number() OVER (PARTITION BY o.kind, o.partition_key ORDER BY o.aged DESC,
				CASE WHEN o.aged THEN 0 ELSE o.priority END, o.run_at, o.id) AS pn
			FROM ordered o
		) x
		WHERE x.pn <= x.plim
	) c
	WHERE c.kn <= c.klim
	ORDER BY ` + claimOrderSQL + `
	LIMIT $8
), claimed AS (
	UPDATE {jobs} j SET
		state = 'running',
		owner = $9,
		lease_token = gen_random_uuid(),
		attempt = j.attempt + 1,
		fence = j.fence + 1,
		lease_expires_at = $11::timestamptz + $10::bigint * interval '1 microsecond',
		attempted_at = $11::timestamptz
	-- By primary key (= ANY of an array, never a join, and no state
	-- test: cand locked the rows in a claimable state): joined to picked,
	-- a generic plan that trusts stale statistics probed the claim
	-- index, every due job of the kind, once per picked row.
	WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
	RETURNING {jcols}
), taken AS (
	SELECT kind, count(*) AS n FROM claimed GROUP BY kind
), kinds_drawn AS (
	UPDATE {flows} f SET
		rate_tat = CASE WHEN u.rint > 0
			THEN greatest(coalesce(f.rate_tat, $11::timestamptz), $11::timestamptz) + t.n * u.rint * interval '1 microsecond'
			ELSE f.rate_tat END,
		breaker = coalesce(u.probe, f.breaker)
	FROM unnest($1::text[], $13::bigint[], $14::jsonb[]) AS u(kind, rint, probe)
	JOIN taken t ON t.kind = u.kind
	WHERE f.kind = u.kind AND (u.rint > 0 OR u.probe IS NOT NULL)
), parts_drawn AS (
	INSERT INTO {buckets} AS b (kind, partition_key, tat)
	SELECT c.kind, c.partition_key, $11::timestamptz + count(*) * k.pint * interval '1 microsecond'
	FROM claimed c JOIN k ON k.kind = c.kind
	WHERE k.parted AND k.pburst > 0
	GROUP BY c.kind, c.partition_key, k.pint
	ON CONFLICT (kind, partition_key) DO UPDATE SET
		tat = greatest(b.tat, $11::timestamptz) + (excluded.tat - $11::timestamptz)
), probes_drawn AS (
	UPDATE {pbreakers} b SET breaker = u.probe
	FROM unnest($17::text[], $18::text[], $20::jsonb[]) AS u(kind, key, probe)
	WHERE u.probe IS NOT NULL AND b.kind = u.kind AND b.partition_key = u.key
	  AND EXISTS (SELECT 1 FROM claimed c WHERE c.kind = u.kind AND c.partition_key = u.key)
)
SELECT * FROM (SELECT c.*, ` + agedSQL + ` AS aged FROM claimed c) c ORDER BY ` + claimOrderSQL,

		// After a claim (in its transaction), what is left: per kind
		// and partition (kinds without partition limits: one row, key
		// ''), the earliest run_at of a job that may start once due
		// (first of its sequence), the kind's and the partition's running
		// jobs, the partition's rate bucket and the kind's.
		next: `SELECT k.kind, pk.key, min(n.run_at),
	(SELECT count(*) FROM {jobs} r WHERE r.kind = k.kind AND r.state = 'running'),
	CASE WHEN k.parted THEN (SELECT count(*) FROM {jobs} r WHERE r.kind = k.kind AND r.partition_key = pk.key AND r.state = 'running') ELSE 0 END,
	(SELECT b.tat FROM {buckets} b WHERE b.kind = k.kind AND b.partition_key = pk.key),
	(SELECT f.rate_tat FROM {flows} f WHERE f.kind = k.kind)
FROM unnest($1::text[], $2::bool[]) AS k(kind, parted)
CROSS JOIN LATERAL (
	SELECT '' AS key WHERE NOT k.parted
	UNION ALL
	SELECT p.key FROM (` + partKeysSQL + `) p WHERE k.parted
) pk
CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
CROSS JOIN LATERAL (
	(SELECT j.run_at FROM {jobs} j
	WHERE pk.key > '' AND j.kind = k.kind AND j.priority = p.priority AND j.state IN ('scheduled', 'retrying')
	  AND j.partition_key = pk.key AND j.partition_key > ''
	  AND ` + seqHeadSQL + `
	ORDER BY j.run_at
	LIMIT 1)
	UNION ALL
	(SELECT j.run_at FROM {jobs} j
	WHERE pk.key = '' AND k.parted AND j.kind = k.kind AND j.priority = p.priority AND j.state IN ('scheduled', 'retrying')
	  AND j.partition_key = '' AND j.unkeyed
	  AND ` + seqHeadSQL + `
	ORDER BY j.run_at
	LIMIT 1)
	UNION ALL
	(SELECT j.run_at FROM {jobs} j
	WHERE NOT k.parted AND j.kind = k.kind AND j.priority = p.priority AND j.state IN ('scheduled', 'retrying')
	  AND ` + seqHeadSQL + `
	ORDER BY j.run_at
	LIMIT 1)
) n
GROUP BY k.kind, k.parted, pk.key`,

		// Finish, as the plain one (see queries.go), returning each
		// applied row's kind and the outcome it applied, in the call's
		// order, for the breakers. Listeners hear of kinds whose jobs
		// became claimable again, and of the kinds listed in $7 (those
		// with a concurrency limit or a breaker) whose jobs left
		// running, since a slot or a probe is free: only while some
		// host may be held back, though (a partition limit, a breaker
		// not closed, or the kind's running jobs, as the statement saw
		// them before it, at three quarters of its limit or more), since
		// far below the limit no claim waits for a slot, and every
		// notification makes every host claim. After the applied
		// rows (ordered by the call's order) come the breakers of their
		// kinds as the statement's snapshot saw them (id NULL), and
		// whether verdicts wait to be folded into them, for FinishFlow
		// to see whether the outcomes change them.
		finish: `WITH ` + finishLockedSQL(finishLeavesSQL("$8", "$9")) + `,
` + finishEndSQL("j.id, i.token, j.kind, j.state, j.run_at, i.outcome, i.ord, j.partition_key") + `,
ended AS (
	SELECT id, token, kind, outcome, ord, partition_key FROM changed
	UNION ALL
	SELECT id, fin_token, kind, fin_outcome, fin_ord, partition_key FROM gone
), notified AS MATERIALIZED (` + strings.ReplaceAll(notifiedSQL, "$CHAN", "$6") + `
	UNION ALL
	SELECT pg_notify($6, json_build_object('kind', f.kind, 'run_at', clock_timestamp())::text)
	FROM (SELECT DISTINCT kind FROM ended WHERE kind = ANY($7::text[])) freed
	JOIN {flows} f ON f.kind = freed.kind
	WHERE f.config -> 'partition_concurrency' IS NOT NULL
	   OR f.breaker ->> 'state' IN ('open', 'half_open')
	   OR (f.config -> 'partition_breaker' IS NOT NULL AND EXISTS (SELECT 1 FROM ended e JOIN {pbreakers} b
		ON b.kind = e.kind AND b.partition_key = e.partition_key
		WHERE e.kind = f.kind AND b.breaker ->> 'state' IN ('open', 'half_open')))
	   OR 4 * (SELECT count(*) FROM {jobs} r WHERE r.kind = f.kind AND r.state = 'running')
	      >= 3 * (f.config ->> 'concurrency')::bigint
)
SELECT * FROM (
	SELECT id, token, kind, outcome, ord, NULL::jsonb AS config, NULL::jsonb AS breaker, NULL::bool AS pending,
		partition_key
	FROM ended WHERE (SELECT count(*) FROM notified) >= 0
	UNION ALL
	SELECT NULL, NULL, f.kind, NULL, NULL, f.config, f.breaker,
		EXISTS (SELECT 1 FROM {verdicts} v WHERE v.kind = f.kind), NULL FROM {flows} f
	WHERE f.kind IN (SELECT kind FROM ended)
	  AND (f.config -> 'breaker' IS NOT NULL OR f.config -> 'partition_breaker' IS NOT NULL)
	UNION ALL
	SELECT NULL, NULL, b.kind, NULL, NULL, NULL, b.breaker, NULL, b.partition_key FROM {pbreakers} b
	WHERE (b.kind, b.partition_key) IN (SELECT kind, partition_key FROM ended)
) r ORDER BY r.ord NULLS LAST`,

		// A kind's pending count: what inserts counted, plus the deltas
		// state changes appended since, which are folded in (the caller
		// holds the kind's row).
		pending: `WITH d AS (DELETE FROM {deltas} WHERE kind = $1 RETURNING delta)
UPDATE {flows} SET pending = greatest(0, pending + coalesce((SELECT sum(delta) FROM d), 0))
WHERE kind = $1 RETURNING pending`,

		// All pending jobs, counted up to $1: PendingLimit bounds a
		// producer, so the count stops at the bound (an index-only scan of
		// jobs_claim_idx).
		pendingAll: `SELECT count(*) FROM (SELECT 1 FROM {jobs} WHERE state IN ('scheduled', 'retrying') LIMIT $1) p`,

		addPending: `UPDATE {flows} SET pending = pending + $2 WHERE kind = $1`,

		// After an insert through the plain path, in its transaction:
		// the rows it inserted get their partition and sequence keys and
		// are marked counted when their kind has MaxPending; returns how
		// many were marked per kind.
		//
		// The rows are this transaction's own, not yet committed
		// (updateByProbeSQL): as a join of the arrays with jobs, its
		// generic plan read every scheduled job, on any statistics.
		setKeys: `WITH u AS (` + updateByProbeSQL("",
			"unnest($1::uuid[], $2::text[], $3::bool[]) AS x(id, skey, counted)",
			" AND (j.state = 'scheduled') IS TRUE AND j.attempt = 0",
			"sequence_key = nullif(x.skey, ''), pending_counted = x.counted",
			"\n\tRETURNING j.kind, j.pending_counted") + `)
SELECT kind, count(*) FROM u WHERE pending_counted GROUP BY kind`,

		lockBreakers: `SELECT f.kind, f.config, f.breaker, f.rate_tat, ` + pendingVerdictsSQL + ` FROM {flows} f
WHERE f.kind = ANY($1::text[]) AND (f.config -> 'breaker' IS NOT NULL OR f.config -> 'partition_breaker' IS NOT NULL)
ORDER BY f.kind FOR UPDATE OF f`,

		// The partition breakers a claim decides with (the kinds' rows
		// held): those not closed.
		openPartBreakers: `SELECT kind, partition_key, breaker FROM {pbreakers}
WHERE kind = ANY($1::text[]) AND breaker ->> 'state' IN ('open', 'half_open')`,

		// The breakers of the (kind, key) pairs a Finish fed (the kinds'
		// rows held).
		partBreakersOf: `SELECT b.kind, b.partition_key, b.breaker FROM {pbreakers} b
JOIN (SELECT DISTINCT kind, key FROM unnest($1::text[], $2::text[]) AS u(kind, key)) u
	ON b.kind = u.kind AND b.partition_key = u.key`,

		// Stores (breaker not NULL) or forgets (NULL) partition breakers.
		writePartBreaker: `WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS u(kind, key, breaker)),
	d AS (DELETE FROM {pbreakers} b USING u WHERE u.breaker IS NULL AND b.kind = u.kind AND b.partition_key = u.key)
INSERT INTO {pbreakers} AS b (kind, partition_key, breaker)
SELECT kind, key, breaker FROM u WHERE breaker IS NOT NULL
ON CONFLICT (kind, partition_key) DO UPDATE SET breaker = excluded.breaker`,

		// A kind's partition breakers ($2 NULL: all of them; otherwise
		// the one of key $2) with their partitions' running jobs.
		listPartBreakers: `SELECT b.partition_key, b.breaker,
	(SELECT count(*) FROM {jobs} r WHERE r.kind = b.kind AND r.partition_key = b.partition_key AND r.state = 'running'),
	clock_timestamp()
FROM {pbreakers} b WHERE b.kind = $1 AND ($2::text IS NULL OR b.partition_key = $2) ORDER BY b.partition_key COLLATE "C"`,

		// Prune: the closed breakers (counting failures) of partitions
		// with no job scheduled, retrying or running. Without the kind's
		// row: a Finish feeding one of them at the same time at worst
		// loses the count of a partition that has no job left.
		pruneBreakers: `DELETE FROM {pbreakers} b
WHERE coalesce(b.breaker ->> 'state', '') NOT IN ('open', 'half_open')
  AND NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.kind = b.kind AND j.partition_key = b.partition_key
	AND j.state IN ('scheduled', 'retrying', 'running'))`,

		// A caller's transaction (CompleteTx) records its verdicts here
		// rather than in the kind's row, which it would hold until the
		// caller commits (migration 0011).
		addVerdicts: `INSERT INTO {verdicts} (kind, failed)
SELECT u.kind, u.failed FROM unnest($1::text[], $2::bool[]) WITH ORDINALITY AS u(kind, failed, ord) ORDER BY u.ord`,

		// A claim holding the kinds' rows stores the breakers it folded
		// the verdicts into, and deletes those verdicts (by seq: one
		// committed since it read them is kept for the next).
		foldVerdicts: `WITH d AS (DELETE FROM {verdicts} WHERE seq = ANY($3::bigint[]))
UPDATE {flows} f SET breaker = u.breaker
FROM unnest($1::text[], $2::jsonb[]) AS u(kind, breaker) WHERE f.kind = u.kind`,

		clearVerdicts: `DELETE FROM {verdicts} WHERE seq = ANY($1::bigint[]) OR kind = $2`,

		addSeqKinds: `INSERT INTO {seqkinds} (kind) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`,

		sweepUnkeyed: sweepUnkeyedSQL,
	}
	// $11 NULL (a claim in one round trip, whose time Go did not read):
	// the clock read once the locks were held, kept in ax.flow_now.
	q.claim = strings.ReplaceAll(q.claim, "$11::timestamptz", "coalesce($11::timestamptz, current_setting('ax.flow_now')::timestamptz)")
	// TestFlowQueriesSubstituted fails when a statement is left out here.
	for _, p := range []*string{&q.kinds, &q.lockOne, &q.lockMany, &q.shareMany, &q.deleteFlow, &q.upsertFlow, &q.recountPending,
		&q.notifyKinds, &q.states, &q.setBreaker, &q.claim, &q.next, &q.finish, &q.lockBreakers,
		&q.pending, &q.pendingAll, &q.addPending, &q.setKeys, &q.addSeqKinds, &q.sweepUnkeyed,
		&q.addVerdicts, &q.foldVerdicts, &q.clearVerdicts,
		&q.openPartBreakers, &q.partBreakersOf, &q.writePartBreaker, &q.listPartBreakers, &q.pruneBreakers} {
		*p = r.Replace(*p)
	}
	return q
}
