package pgstore

import (
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds the Store's SQL with quoted, schema qualified names
// substituted for {jobs} (the hot table), {history} (jobs_history) and
// {alljobs} (the view over both, for reads that must see finished jobs
// wherever they are; see migration 0008). The names come from a validated
// schema name passed through pgx.Identifier.Sanitize; everything else is a
// parameter.
type queries struct {
	get           string
	insertOne     string
	cursorAudit   string
	insertClaimed string
	insertMany    string
	holders       string
	notify        string
	claim         string
	claimLost     string
	claimOpen     string
	claimOneKind  string
	finish        string
	finishWait    string
	extend        string
	rescue        string
	prune         string
	list          string
	controlCur    string
	cancel        string
	pause         string
	resume        string
	runNow        string
	countLive     string
	countFinal    string
	finalBound    string
	finalSample   string
	reltuples     string
}

// Claimable and final states as SQL lists.
const (
	claimableSQL = `('scheduled', 'retrying')`
	finalSQL     = `('succeeded', 'dead', 'cancelled')`
	// archivableSQL selects the final jobs Archive may move; it is the
	// predicate of jobs_finished_idx (migration 0008), written the same
	// way so that the planner proves a query's WHERE implies it.
	archivableSQL = `state = 'cancelled' OR (state IN ('succeeded', 'dead') AND (unique_key IS NULL OR NOT unique_finished))`
	// keptSQL selects the final jobs that keep their unique key until
	// pruned: jobs_kept_idx's predicate.
	keptSQL = `state IN ('succeeded', 'dead') AND unique_key IS NOT NULL AND unique_finished`
)

// claimTailSQL are the last CTEs of the plain claim and the open claim
// (claimopen.go): the UPDATE of the rows locked1 holds, and from the
// candidates they left, the earliest run_at (NextRunAt) and each range's
// earliest due one (the claim cursors).
//
// The UPDATE reaches the locked rows by tuple ID, as the claim of one
// kind does (claimOneKindSQL, which says why): a row another transaction
// wrote after the statement's snapshot and left claimable is locked in
// its newest version, which the snapshot does not see, so the UPDATE
// skips it and it stays claimable. What is left is therefore read past
// the rows claimed, not the rows locked: such a row is the next due, and
// no cursor moves past it.
const claimTailSQL = `claimed AS (
	-- No state test: locked1 checked it on the rows it holds. By tuple
	-- ID: on a Citus shard, {routed:j} (placement.go).
	` + plainClaimSetSQL + `
	WHERE {routed:j}j.ctid = ANY (ARRAY(SELECT tid FROM locked1))
	RETURNING {jcols}
), next AS (
	SELECT min(run_at) AS run_at FROM cand
	WHERE id NOT IN (SELECT id FROM claimed) -- a hashed subplan
), held AS (
	SELECT kind, priority, min(run_at) AS run_at FROM cand
	WHERE due AND id NOT IN (SELECT id FROM claimed)
	GROUP BY kind, priority
)`

// plainClaimOrderSQL is the plain claim's order over its candidates: jobs
// due for the priority aging bound first (aged, oldest first, whatever
// their priority), then strict priority, then run_at.
const plainClaimOrderSQL = `aged DESC, CASE WHEN aged THEN 0 ELSE priority END, run_at, id`

// notifiedSQL is a CTE body sending one notification per kind, with the
// earliest run_at, for the rows of the CTE named "changed" that became
// claimable. The notifications are delivered when the transaction commits.
const notifiedSQL = `SELECT pg_notify($CHAN, json_build_object('kind', kind, 'run_at', min(run_at))::text)
	FROM changed WHERE state IN ` + claimableSQL + ` GROUP BY kind`

// insertOneSQL completes a statement that inserts one job (insertOne,
// insertClaimedSQL): head is its WITH list up to the ins CTE, an INSERT
// ... ON CONFLICT DO NOTHING RETURNING without its closing parenthesis.
// The statement notifies listeners of the inserted row when it is
// claimable and returns it (the inserted columns), or, when the insert
// gave way to a unique key, the job holding that key in the key's scope
// (the held columns; $2 kind, $9 key, $11 global, $13 period). A holder
// committed after the statement's snapshot, or that gave the key up
// meanwhile, yields no row: the caller retries.
func insertOneSQL(head, inserted, held string) string {
	return head + `
), changed AS (SELECT * FROM ins
), notified AS MATERIALIZED (` + strings.ReplaceAll(notifiedSQL, "$CHAN", "$10") + `)
SELECT ` + inserted + ` FROM ins
UNION ALL
SELECT ` + held + ` FROM {jobs}
WHERE ` + uniqueSpaceSQL + ` = (CASE WHEN $11 THEN '' ELSE $2 END) AND unique_period = $13
	AND unique_window = ` + uniqueWindowSQL("$13::int") + ` AND unique_key = $9
	AND ` + uniqueHeldSQL("") + ` AND NOT EXISTS (SELECT 1 FROM ins)`
}

// errorEntrySQL builds one entry of the errors array for attempt j.attempt
// (store.AttemptError), from the job's row as the attempt left it: its
// owner ran the attempt, claimed at attempted_at.
func errorEntrySQL(msg string) string {
	return `jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(), 'error', ` + msg + `,
		'node', j.owner, 'started_at', j.attempted_at))`
}

// buildQueries renders the statements for schema, placed by p (nil: on
// PostgreSQL, see placement).
func buildQueries(schema string, p *placement) queries {
	r := strings.NewReplacer(append([]string{"{jobs}", pgx.Identifier{schema, "jobs"}.Sanitize(),
		"{history}", pgx.Identifier{schema, "jobs_history"}.Sanitize(),
		"{alljobs}", pgx.Identifier{schema, "jobs_all"}.Sanitize(),
		"{cols}", jobColumns, "{jcols}", prefixed("j")}, p.pairs()...)...)
	q := queries{
		get: `SELECT {cols} FROM {alljobs} WHERE id = $1`,

		insertClaimed: insertClaimedSQL,
		claimLost:     claimLostSQL,
		claimOpen:     claimOpenSQL,
		claimOneKind:  claimOneKindSQL,
		cursorAudit:   cursorAuditSQL,

		// One round trip for one job: insert, or find the holder of the
		// unique key in its scope (insertOneSQL); the guard fails the
		// statement when the ID is that of a job in the history
		// (historyids.go). The run_at expression is written
		// twice, for run_at and scheduled_at: now() is the transaction's
		// start, so both get the same value. The Period window is that of
		// statement_timestamp(), the store clock (Store.Now), which is one
		// value for the whole statement: the insert and the lookup agree.
		insertOne: insertOneSQL(`WITH `+historyGuardSQL+`, ins AS (
	INSERT INTO {jobs} AS j (id, kind, payload, metadata, priority, run_at, scheduled_at, max_attempts, unique_key,
		unique_global, unique_finished, unique_period, unique_window, partition_key, unkeyed)
	SELECT $1, $2, $3, $4, $5, `+insertRunAtSQL+`, `+insertRunAtSQL+`, $8, $9,
		$11, $12, $13, `+uniqueWindowSQL("$13::int")+`, $14, $15
	WHERE NOT EXISTS (SELECT 1 FROM guard)
	ON CONFLICT `+uniqueIndexSQL+` DO NOTHING
	RETURNING id, kind, run_at, state`,
			"id, false, (SELECT count(*) FROM notified)", "id, true, 0"),

		// Payloads travel as json, which PostgreSQL keeps as the text sent.
		// The caller computes the windows ($12) from one reading of the
		// store clock, so that holders can look the same keys up.
		insertMany: `INSERT INTO {jobs} AS j (id, kind, payload, metadata, priority, run_at, scheduled_at, max_attempts, unique_key,
	unique_global, unique_finished, unique_period, unique_window, partition_key, unkeyed)
SELECT id, kind, payload, metadata, priority, run_at, run_at, max_attempts, unique_key,
	unique_global, unique_finished, unique_period, unique_window, partition_key, unkeyed
FROM unnest($1::uuid[], $2::text[], $3::json[], $4::jsonb[], $5::smallint[],
	$6::timestamptz[], $7::int[], $8::text[], $9::boolean[], $10::boolean[], $11::int[], $12::bigint[], $13::text[],
	$14::boolean[])
	AS u(id, kind, payload, metadata, priority, run_at, max_attempts, unique_key,
		unique_global, unique_finished, unique_period, unique_window, partition_key, unkeyed)
ON CONFLICT ` + uniqueIndexSQL + ` DO NOTHING
RETURNING id`,

		// The holders of keys in their scopes ($1 the kind, or '' for a
		// global key), by position in the arrays: a probe of
		// jobs_unique_scope_idx per key. As a join, its generic plan
		// scanned every keyed job once per key, on any statistics
		// (TestGenericPlansAreLinear); OFFSET 0 keeps the probe from
		// being pulled up into one (the package doc: generic plans).
		holders: `SELECT u.i, j.id
FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[]) WITH ORDINALITY AS u(space, period, win, key, i)
CROSS JOIN LATERAL (
	SELECT j.id FROM {jobs} j
	WHERE {onshard:j}(CASE WHEN j.unique_global THEN '' ELSE j.kind END) = u.space
	  AND j.unique_period = u.period AND j.unique_window = u.win AND j.unique_key = u.key
	  AND ` + uniqueHeldSQL("j.") + `
	OFFSET 0
) j`,

		notify: `SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n`,

		// The claim, in three steps, so that it locks only the rows it
		// takes and scans each range of jobs_claim_idx once.
		//
		// cand chooses without locking: for each requested (kind,
		// priority), a range scan of jobs_claim_idx in run_at order takes
		// the due rows, up to one more than the claim could take from the
		// range (so that a row it leaves gives NextRunAt and the range's
		// cursor), and, when fewer are due, the first future row, from a
		// second descent that starts at now() rather than at the range's
		// start, where the dead entries of claimed rows gather while a
		// snapshot holds back vacuum. The Limit above the UNION ALL stops
		// before that second descent when the first branch filled it.
		//
		// ranked applies per-kind limits (across priorities, in claim
		// order) and then the total limit, in claim order
		// (plainClaimOrderSQL: jobs due for the aging bound $6 first,
		// then strict priority, then run_at; each range's candidates are
		// its oldest due rows, so the aged ones among them); locked1
		// locks exactly those rows, by primary key, with SKIP LOCKED,
		// re-checking that each is still claimable and due. The fifth
		// column counts the first choices it did not get (another
		// claimer holds or took them): when some were lost, the Store
		// runs a second statement (claimLostSQL, in claimlost.go) that
		// takes the next-best due rows in the same order, stepping over
		// up to thousands of rows other claims hold. A second
		// round inside this statement replaced lost rows from the
		// range that lost them only, so it took a fresh low-priority
		// job ahead of due high-priority ones, or none of a kind's due
		// jobs at another priority (issue 41); doing it here in full
		// claim order would lock rows it does not take. Candidates need
		// one spare row per range, for NextRunAt and the cursor: the
		// spare quarter they once had cost a fifth more index entries,
		// heap visits and sorted rows than the claim took, on every
		// claim (issue 24).
		//
		// $7 (claim cursors, cursor.go) gives each range a lower bound
		// on run_at (NULL: its start); the third column returns, per
		// range in the same layout, the earliest due candidate the claim
		// left, where the next scan may start.
		//
		// $8 (ClaimParams.Ahead) widens "due" to run_at <= now() + $8:
		// those jobs are claimed ahead, with attempted_at = run_at, and
		// the second column (clock_timestamp(), read as the rows are
		// produced, after the locks) lets the runtime hold them until
		// then without starting one early by this server's clock.
		//
		// NextRunAt is the earliest candidate not claimed: each range
		// fetched more rows than it can give, or all it had, so the
		// earliest row it leaves behind is among its candidates.
		//
		// The rows come back unordered: claimRows puts them in claim
		// order (sortClaimed), so the server does not copy every claimed
		// row, payload and all, into a sort.
		//
		// Every join is a lateral probe by primary key, a window over a
		// sort, or a hashed NOT IN: nothing compares rows pairwise, so
		// generic plans stay linear (TestGenericPlansAreLinear).
		//
		// (state IN …) IS TRUE, here and in finish and extend, means the
		// same as the bare test in a WHERE clause, but PostgreSQL cannot
		// prove a partial index's predicate from it. A probe by id thus
		// has only the primary key to use: with the bare test, statistics
		// taken while no job was live make jobs_claim_idx or
		// jobs_busy_idx look empty, and the planner scans the whole
		// partial index once per probe instead (found by axbench
		// heldxmin, where lease extensions then timed out).
		claim: `WITH cand AS MATERIALIZED (
	SELECT c.id, k.kind, p.priority, c.run_at, k.lim, c.run_at <= now() + $8::bigint * interval '1 microsecond' AS due,
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
			LIMIT least(k.lim, $3) + 1)
			UNION ALL
			(SELECT j.id, j.run_at FROM {jobs} j
			WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority
			  AND j.state IN ` + claimableSQL + ` AND j.run_at > now() + $8::bigint * interval '1 microsecond'
			ORDER BY j.run_at
			LIMIT 1)
		) u
		LIMIT least(k.lim, $3) + 1
	) c
), ranked AS MATERIALIZED (
	SELECT id, kind, priority, run_at, lim, aged,
	       krn <= lim AND count(*) FILTER (WHERE krn <= lim) OVER (ORDER BY ` + plainClaimOrderSQL + `) <= $3 AS first
	FROM (
		SELECT *, row_number() OVER (PARTITION BY kind ORDER BY ` + plainClaimOrderSQL + `) AS krn
		FROM cand WHERE due
	) r
), locked1 AS MATERIALIZED (
	SELECT r.id, r.kind, r.priority, r.run_at, r.lim, r.aged, l.tid
	FROM ranked r
	CROSS JOIN LATERAL (
		SELECT j.ctid AS tid FROM {jobs} j
		WHERE {onshard:j}j.id = r.id AND (j.state IN ` + claimableSQL + `) IS TRUE AND j.run_at <= now() + $8::bigint * interval '1 microsecond'
		FOR UPDATE SKIP LOCKED
	) l
	WHERE r.first
), ` + claimTailSQL + `
SELECT now(), clock_timestamp(), (SELECT run_at FROM next),
	ARRAY(SELECT h.run_at FROM unnest($1::text[]) WITH ORDINALITY AS k(kind, ord)
		CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
		LEFT JOIN held h ON h.kind = k.kind AND h.priority = p.priority
		ORDER BY k.ord, p.priority),
	(SELECT count(*) FROM ranked WHERE first) - (SELECT count(*) FROM locked1),
	c.*
FROM (SELECT 1) AS one LEFT JOIN claimed c ON true`,

		// Finish: every row guarded by its lease token. Outcomes:
		// 1 succeeded, 2 retry, 3 dead, 4 snooze, 5 release, 6 cancelled.
		// The input keeps the first row of a lease listed twice. A job may
		// come with two leases, a zombie's and the current holder's; each
		// input row is a lateral probe of jobs by primary key that locks
		// the job only when the token is the current one and it runs, so
		// only the current lease applies and locked holds at most one row
		// per job, carrying its outcome. The probes run in id order (the
		// input's sort), as in extend. The UPDATE and DELETE then reach
		// the locked rows by their tuple IDs (finishEndSQL).
		//
		// The probes skip rows another transaction holds (a handler that
		// returned with its CompleteTx transaction still open): the rows
		// of the other jobs are written at once instead of queueing behind
		// a user's transaction. The input rows whose job still runs under
		// their token in the statement's snapshot but were not locked come
		// back flagged busy (third column true); Finish writes them with
		// finishWait, which waits, so that no outcome is lost.
		//
		// A job that ends here and needs nothing more of the hot table
		// (finishLeavesSQL) leaves it in this statement: finishEndSQL
		// deletes it from jobs and inserts its final row into the
		// history, so it is written once at its end rather than updated
		// here and moved by a later archive pass. $7 and $8 bound the
		// store clock's times whose history partitions are known to
		// exist (NULL: none, every job stays).
		//
		// Linear by construction: an earlier form joined locked back to the
		// input on (id, token); under a generic plan that became a nested
		// loop over two CTE scans comparing every outcome with every other
		// (Rows Removed by Join Filter: 999,000 at 1,000 rows).
		finish: `WITH ` + finishInputSQL + `, locked AS MATERIALIZED (
	SELECT j.id, j.tid, i.token, i.outcome, i.delay_us, i.err, i.ord, j.fstate, j.leaves
	FROM input i
	CROSS JOIN LATERAL (
		SELECT j.id, j.ctid AS tid, ` + finishStateSQL + ` AS fstate, ` + finishLeavesSQL("$7", "$8") + ` AS leaves FROM {jobs} j
		WHERE j.id = i.id AND j.lease_token = i.token AND (j.state = 'running') IS TRUE
		FOR UPDATE SKIP LOCKED
	) j
), ` + finishEndSQL("j.id, i.token, j.kind, j.state, j.run_at") + `,
notified AS MATERIALIZED (` + strings.ReplaceAll(notifiedSQL, "$CHAN", "$6") + `)
SELECT id, token, false FROM changed WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT id, fin_token, false FROM gone
UNION ALL
SELECT i.id, i.token, true FROM input i
WHERE i.id NOT IN (SELECT id FROM locked) -- a hashed subplan
  AND EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = i.id AND j.lease_token = i.token AND (j.state = 'running') IS TRUE
	OFFSET 0) -- a probe per input row (the package doc: generic plans)`,

		// FinishWait is the finish of the rows finish found busy: the
		// same, waiting for the locks. It runs after finish applied the
		// other rows (committed them, outside a caller's transaction), so
		// only the busy rows wait.
		// Its rows all stay in jobs (leaves false), updated as Finish's
		// are (finishChangedSQL).
		finishWait: `WITH ` + finishLockedSQL("false") + `, ` + finishChangedSQL("j.id, i.token, j.kind, j.state, j.run_at") + `, notified AS MATERIALIZED (` + strings.ReplaceAll(notifiedSQL, "$CHAN", "$6") + `)
SELECT id, token FROM changed WHERE (SELECT count(*) FROM notified) >= 0`,

		// Extend: as in finish, a lateral probe by primary key per lease,
		// in id order, locks the jobs still held under their tokens; the
		// UPDATE reaches them by tuple ID. The probes skip rows another
		// transaction holds (a handler's CompleteTx not yet committed): an
		// extension never waits on a user's transaction, which would hold
		// back the extension of every other lease of the host until their
		// leases lapsed. The leases it did not extend are read from the
		// statement's snapshot, by primary key (so is a row locked in a
		// version written after the snapshot, an operator's cancel say,
		// which the UPDATE by tuple ID does not see): kind 1, the
		// job still runs under the token (busy: held, not extended this
		// time); kind 2, the job left running under the token (an outcome
		// written with it ended the attempt: Finish keeps the token, rescue
		// clears it; Archive may have moved the job to the history, token
		// and all); no row, the lease is lost. Kind 0 rows were extended.
		extend: `WITH input AS MATERIALIZED (
	SELECT DISTINCT ON (id, token) id, token
	FROM unnest($1::uuid[], $2::uuid[]) AS u(id, token)
	ORDER BY id, token
), locked AS MATERIALIZED (
	SELECT j.id, j.tid
	FROM input l
	CROSS JOIN LATERAL (
		SELECT j.id, j.ctid AS tid FROM {jobs} j
		WHERE {onshard:j}j.id = l.id AND j.lease_token = l.token AND (j.state = 'running') IS TRUE
		FOR UPDATE SKIP LOCKED
	) j
), extended AS (
	UPDATE {jobs} j SET lease_expires_at = now() + $3::bigint * interval '1 microsecond'
	-- locked checked state and token on the rows it holds. By their
	-- tuple IDs as an array, not a join with locked, which the planner
	-- may order either way (the package doc: generic plans); on a Citus
	-- shard, {routed:j} (placement.go).
	WHERE {routed:j}j.ctid = ANY (ARRAY(SELECT tid FROM locked))
	RETURNING j.id, j.lease_token, j.cancel_requested
)
SELECT id, lease_token, cancel_requested, 0 FROM extended
UNION ALL
SELECT l.id, l.token, j.cancel_requested, CASE WHEN (j.state = 'running') IS TRUE THEN 1 ELSE 2 END
FROM input l
CROSS JOIN LATERAL (
	SELECT j.state, j.cancel_requested FROM {jobs} j WHERE {onshard:j}j.id = l.id AND j.lease_token = l.token
	UNION ALL
	SELECT h.state, false FROM {history} h WHERE {onshard:h}h.id = l.id AND h.lease_token = l.token
) j
WHERE l.id NOT IN (SELECT id FROM extended) -- a hashed subplan`,

		// Rescue: expired leases, oldest first, skipping rows another
		// rescuer (or a late Finish) holds. The running jobs are read
		// through jobs_busy_idx and sorted by expiry: there are at most as
		// many as the cluster's workers, and not indexing lease_expires_at
		// lets lease extensions be HOT updates. The UPDATE finds the
		// locked rows by primary key (= ANY of an array, never a join). A job whose cancel was
		// requested is cancelled, and one whose pause was requested is
		// paused while attempts remain, as Finish would have done.
		rescue: `WITH expired AS MATERIALIZED (
	SELECT id FROM {jobs}
	WHERE state = 'running' AND lease_expires_at < now()
	ORDER BY lease_expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), changed AS (
	UPDATE {jobs} j SET
		state = ` + rescueStateSQL + `,
		run_at = CASE WHEN ` + rescueStateSQL + ` IN ('retrying', 'paused') THEN now() ELSE j.run_at END,
		errors = j.errors || ` + errorEntrySQL(`'lease expired (owner ' || j.owner || ' stopped extending it)'`) + `,
		lease_token = NULL, -- the lease was taken: its extension reads "lost"
		lease_expires_at = NULL,
		cancel_requested = false,
		pause_requested = false,
		finished_at = CASE WHEN ` + rescueStateSQL + ` IN ('retrying', 'paused') THEN NULL ELSE now() END
	-- No state test: expired checked it on the rows it holds.
	WHERE j.id = ANY (ARRAY(SELECT id FROM expired))
	RETURNING j.id, j.kind, j.state, j.run_at, j.owner, j.attempt
), notified AS MATERIALIZED (` + strings.ReplaceAll(notifiedSQL, "$CHAN", "$2") + `)
SELECT id, kind, owner, attempt, state FROM changed WHERE (SELECT count(*) FROM notified) >= 0`,

		// Prune, hot table: the oldest final rows of each of the two
		// partial indexes that hold them (jobs_finished_idx: the rows
		// Archive has not moved yet; jobs_kept_idx: those keeping their
		// unique key), locked with SKIP LOCKED, then deleted by tuple ID
		// (= ANY of an array: a join here let a generic plan hash-join
		// against a sequential scan of the whole table; on a Citus shard,
		// {routed}: placement.go).
		prune: `WITH movable AS (
	SELECT ctid AS tid FROM {jobs}
	WHERE {onshard}(` + archivableSQL + `) AND finished_at < now() - $1::bigint * interval '1 microsecond'
	ORDER BY finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), kept AS (
	SELECT ctid AS tid FROM {jobs}
	WHERE {onshard}(` + keptSQL + `) AND finished_at < now() - $1::bigint * interval '1 microsecond'
	ORDER BY finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
DELETE FROM {jobs} WHERE {routed}ctid = ANY (ARRAY(
	SELECT tid FROM (SELECT tid FROM movable UNION ALL SELECT tid FROM kept) c LIMIT $2
))`,

		list: `SELECT {cols} FROM {alljobs}
WHERE ($1 = '' OR kind = $1) AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[])) AND id > $3
ORDER BY id
LIMIT $4`,

		controlCur: `SELECT state FROM {jobs} WHERE id = $1`,

		cancel: `UPDATE {jobs} SET
	state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
	cancel_requested = (state = 'running'),
	finished_at = CASE WHEN state = 'running' THEN finished_at ELSE now() END
WHERE id = $1 AND state IN ('scheduled', 'retrying', 'paused', 'running')
RETURNING {cols}`,

		// Pause: a claimable job is paused; a running one only gets the
		// request, which its attempt's end (Finish, RescueExpired) acts on.
		pause: `UPDATE {jobs} SET
	state = CASE WHEN state = 'running' THEN state ELSE 'paused' END,
	pause_requested = (state = 'running')
WHERE id = $1 AND (state IN ` + claimableSQL + ` OR (state = 'running' AND NOT pause_requested))
RETURNING {cols}`,

		// Resume: a paused job is scheduled (and announced); a running one
		// has its pause request withdrawn (and is not announced: it is
		// not claimable).
		resume: `WITH changed AS (
	UPDATE {jobs} SET
		state = CASE WHEN state = 'paused' THEN 'scheduled' ELSE state END,
		pause_requested = false
	WHERE id = $1 AND (state = 'paused' OR (state = 'running' AND pause_requested))
	RETURNING {cols}
), notified AS MATERIALIZED (` + strings.ReplaceAll(notifiedSQL, "$CHAN", "$2") + `)
SELECT * FROM changed WHERE (SELECT count(*) FROM notified) >= 0`,

		runNow: `UPDATE {jobs} SET
	state = 'scheduled',
	run_at = now(),
	-- A final job's next attempt is numbered on, with one more allowed
	-- when it used them all.
	max_attempts = CASE WHEN state IN ('dead', 'cancelled') THEN greatest(max_attempts, attempt + 1) ELSE max_attempts END,
	finished_at = NULL,
	cancel_requested = false
WHERE id = $1 AND state IN ('scheduled', 'retrying', 'paused', 'dead', 'cancelled')
	AND NOT ` + heldInHistorySQL + `
RETURNING {cols}, pg_notify($2, json_build_object('kind', kind, 'run_at', run_at)::text)`,

		countLive: `SELECT kind, state, count(*) FROM {jobs} WHERE state IN ` + claimableSQL + ` GROUP BY kind, state
UNION ALL
SELECT kind, 'running', count(*) FROM {jobs} WHERE state = 'running' GROUP BY kind
UNION ALL
SELECT kind, 'paused', count(*) FROM {jobs} WHERE state = 'paused' GROUP BY kind`,

		finalBound: `SELECT count(*) FROM (SELECT 1 FROM {alljobs} WHERE state IN ` + finalSQL + ` LIMIT $1) s`,

		countFinal: `SELECT kind, state, count(*) FROM {alljobs} WHERE state IN ` + finalSQL + ` GROUP BY kind, state`,

		// The sample reads each table (each history partition) at the
		// same rate.
		finalSample: `SELECT kind, state, count(*) FROM (
	SELECT kind, state FROM {jobs} TABLESAMPLE SYSTEM ($1) WHERE state IN ` + finalSQL + `
	UNION ALL
	SELECT kind, state FROM {history} TABLESAMPLE SYSTEM ($1)
) s GROUP BY kind, state`,

		// The size of jobs and of every history partition in pages now;
		// the planner's rows and pages where it measured them; and how
		// many relations with pages were never analyzed (reltuples -1).
		reltuples: `SELECT sum(pg_relation_size(c.oid))::float8 / current_setting('block_size')::float8,
	coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples > 0 AND c.relpages > 0), 0)::float8,
	coalesce(sum(c.relpages) FILTER (WHERE c.reltuples > 0 AND c.relpages > 0), 0)::float8,
	count(*) FILTER (WHERE c.reltuples < 0 AND pg_relation_size(c.oid) > 0)::int
FROM pg_class c
WHERE c.oid = '{jobs}'::regclass
   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = '{history}'::regclass)`,
	}
	for _, p := range []*string{&q.get, &q.insertOne, &q.insertClaimed, &q.cursorAudit, &q.insertMany, &q.holders, &q.notify, &q.claim, &q.claimLost, &q.claimOpen, &q.claimOneKind,
		&q.finish, &q.finishWait, &q.extend, &q.rescue, &q.prune, &q.list, &q.controlCur, &q.cancel, &q.pause,
		&q.resume, &q.runNow, &q.countLive, &q.finalBound, &q.countFinal, &q.finalSample, &q.reltuples} {
		*p = r.Replace(*p)
	}
	return q
}

// uniqueSpaceSQL names where a job's unique key holds (migration 0004):
// its kind, or the empty text for a global key. With the Period, the
// window and the key, it is the key of jobs_unique_scope_idx, over the
// rows uniqueHeldSQL selects.
const uniqueSpaceSQL = `(CASE WHEN unique_global THEN '' ELSE kind END)`

// uniqueIndexSQL is jobs_unique_scope_idx as an ON CONFLICT target, which
// must spell the index's expression and predicate as the index does.
var uniqueIndexSQL = `(` + uniqueSpaceSQL + `, unique_period, unique_window, unique_key) WHERE ` + uniqueHeldSQL("")

// uniqueHeldSQL is jobs_unique_scope_idx's predicate on the columns of
// alias (such as "j.", or "" for none): the rows that hold their key, a
// live job, or a succeeded or dead one whose scope keeps its key.
func uniqueHeldSQL(alias string) string {
	return strings.NewReplacer("$", alias).Replace(`$unique_key IS NOT NULL
	AND ($state IN ('scheduled', 'retrying', 'paused', 'running')
		OR (($unique_finished OR $unique_period > 0) AND $state <> 'cancelled'))`)
}

// heldInHistorySQL is true for a row of {jobs} that is dead or cancelled
// with a Period key that a job in the history holds in the same window.
// jobs_unique_scope_idx covers jobs alone, and Archive moves a period
// key's holder once the period has passed since it finished (no insert
// computes that window again); a run-now of an old dead or cancelled job
// of that window would otherwise take the key a second time. The lookup
// reads only the history finished since the window began (the holder was
// inserted in it, so finished after), and runs only for such rows, a
// rare operator action.
const heldInHistorySQL = `(state IN ('dead', 'cancelled') AND unique_key IS NOT NULL AND unique_period > 0
	AND EXISTS (SELECT 1 FROM {history} h
		WHERE h.finished_at >= to_timestamp({jobs}.unique_window * {jobs}.unique_period)
		  AND h.unique_key = {jobs}.unique_key AND h.unique_period = {jobs}.unique_period
		  AND h.unique_window = {jobs}.unique_window AND h.state <> 'cancelled'
		  AND (CASE WHEN h.unique_global THEN '' ELSE h.kind END) = (CASE WHEN {jobs}.unique_global THEN '' ELSE {jobs}.kind END)))`

// uniqueWindowSQL is the window of the store clock (statement_timestamp())
// for a Period of period seconds, 0 without one: windows are counted from
// the Unix epoch, and the clock is after it, so floor rounds down.
func uniqueWindowSQL(period string) string {
	return `(CASE WHEN ` + period + ` > 0 THEN floor(extract(epoch FROM statement_timestamp()) / ` + period + `)::bigint ELSE 0 END)`
}

// insertRunAtSQL is an inserted job's run_at (and scheduled_at): $6 when
// set, else now() + $7 microseconds.
const insertRunAtSQL = `coalesce($6, now() + $7::bigint * interval '1 microsecond')`

// finishInputSQL is the input CTE of the plain finish statement: the
// rows of the call, the first of a lease listed twice, in id order.
const finishInputSQL = `input AS MATERIALIZED (
	SELECT DISTINCT ON (id, token) id, token, outcome, delay_us, err, ord
	FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::bigint[], $5::text[]) WITH ORDINALITY
		AS u(id, token, outcome, delay_us, err, ord)
	ORDER BY id, token, ord
)`

// finishLockedSQL returns the locked CTE of the waiting Finish
// statements (finishWait and flow's finish, see the plain one's comment):
// one row per job whose current lease an input row names, locked by a
// primary-key probe in id order, carrying its tuple ID (tid), the
// outcome, the input's position (ord), the job's next state (fstate) and
// whether the job leaves the hot table (leaves, a condition on j and i:
// finishLeavesSQL, or false).
func finishLockedSQL(leaves string) string {
	return `locked AS MATERIALIZED (
	SELECT j.id, j.tid, i.token, i.outcome, i.delay_us, i.err, i.ord, j.fstate, j.leaves
	FROM (
		SELECT DISTINCT ON (id, token) id, token, outcome, delay_us, err, ord
		FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::bigint[], $5::text[]) WITH ORDINALITY
			AS u(id, token, outcome, delay_us, err, ord)
		ORDER BY id, token, ord
	) i
	CROSS JOIN LATERAL (
		SELECT j.id, j.ctid AS tid, ` + finishStateSQL + ` AS fstate, ` + leaves + ` AS leaves FROM {jobs} j
		WHERE j.id = i.id AND j.lease_token = i.token AND (j.state = 'running') IS TRUE
		FOR UPDATE
	) j
)`
}

// finishSets are the columns a Finish writes to a job j whose locked row
// is i, with their values: the SET list of the UPDATE of a job that stays
// in jobs (finishSetSQL) and the final row of one that leaves it for the
// history (finalRowSQL), from this one list.
var finishSets = []struct{ col, value string }{
	{"state", finishStateSQL},
	{"run_at", `CASE WHEN ` + finishStateSQL + ` IN ('scheduled', 'retrying', 'paused')
			THEN now() + i.delay_us * interval '1 microsecond' ELSE j.run_at END`},
	{"attempt", `CASE WHEN i.outcome IN (4, 5) AND ` + finishStateSQL + ` IN ('scheduled', 'paused')
			THEN greatest(j.attempt - 1, 0) ELSE j.attempt END`},
	{"errors", `CASE WHEN i.outcome IN (2, 3, 6) THEN j.errors || ` + errorEntrySQL("i.err") + ` ELSE j.errors END`},
	// A snooze (outcome 4) leaves its trace (migration 0018).
	{"snoozes", `CASE WHEN i.outcome = 4 THEN j.snoozes + 1 ELSE j.snoozes END`},
	{"snoozed_at", `CASE WHEN i.outcome = 4 THEN now() ELSE j.snoozed_at END`},
	// lease_token is kept: an extension of the lease that wrote the
	// outcome then reads "finished by its holder", not "lost" (a rescue
	// clears it). Reads show the token of running jobs only.
	{"lease_expires_at", `NULL`},
	{"cancel_requested", `false`},
	{"pause_requested", `false`},
	{"finished_at", `CASE WHEN ` + finishStateSQL + ` IN ` + finalSQL + ` THEN now() END`},
}

// finishSetSQL is what the Finish statements write to a job j that stays
// in jobs, whose locked row is i.
var finishSetSQL = func() string {
	sets := make([]string, len(finishSets))
	for k, f := range finishSets {
		sets[k] = "\n\t\t" + f.col + " = " + f.value
	}
	return strings.Join(sets, ",")
}()

// historyColumns are every column of jobs (and jobs_history): those reads
// scan and those they leave out. TestHistoryCarriesEveryColumn checks the
// two lists against the catalog, so a column a migration adds is in this
// one, and a job moved by its Finish keeps it.
var historyColumns = func() []string {
	var cols []string
	for _, c := range strings.Split(jobColumns, ",") {
		cols = append(cols, strings.TrimSpace(c))
	}
	for _, c := range slices.Sorted(maps.Keys(unreadColumns)) {
		cols = append(cols, c)
	}
	return cols
}()

// finalRowSQL is the select list of a job's final row, in historyColumns'
// order, for a job j (its row as it was) ended by the locked row i: what
// finishSets write, the rest of j as it was.
var finalRowSQL = func() string {
	vals := make([]string, len(historyColumns))
	for k, c := range historyColumns {
		vals[k] = "j." + c
		for _, f := range finishSets {
			if f.col == c {
				vals[k] = f.value
			}
		}
	}
	return strings.Join(vals, ",\n\t\t")
}()

// finishLeavesSQL is true for a locked job j that the outcome of input row
// i ends (succeeded, dead, cancelled) and that needs nothing more of the
// hot table, while the store clock is in [lo, hi), the times whose history
// partitions exist: it leaves jobs in the finishing statement. A job stays
// (for the archive pass, or for good) when it keeps its unique key (a
// scope that keeps finished jobs' keys, a Period whose window has not
// passed: as archiveSQL), or when a trigger of jobs acts on its end:
// follow-ups and batches (0006: jobs_state_changed), sequences (0007:
// jobs_flow_sequence_moved). Those triggers fire on UPDATE OF state,
// which a job leaving by DELETE does not run.
func finishLeavesSQL(lo, hi string) string {
	fstate := finishStateSQL
	return `(now() >= ` + lo + `::timestamptz AND now() < ` + hi + `::timestamptz
			AND j.follow_ups IS NULL AND j.batch_id IS NULL AND j.sequence_key IS NULL
			AND ` + fstate + ` IN ` + finalSQL + `
			AND (j.unique_key IS NULL OR ` + fstate + ` = 'cancelled'
				OR (NOT j.unique_finished AND j.unique_period = 0))) IS TRUE`
}

// finishEndSQL returns the CTEs that end the jobs of locked: changed
// updates those that stay in jobs (returning ret), gone deletes those
// that leave (returning each row as it was, with the outcome's columns
// as fin_*), and an insert writes their final rows into the history. One
// statement deletes and inserts, so a reader sees each job once, in one
// table or the other.
//
// Both reach the rows locked holds by their tuple IDs (tid), not by a
// primary-key descent each (the claim of one kind does the same,
// claimopen.go). A row that another transaction wrote after the
// statement's snapshot (a heartbeat's extension of the same lease,
// committed while locked waited for it) is locked in its newest version,
// which the snapshot does not see: the tuple ID reaches nothing, and the
// second CTE of each pair reaches that row by its primary key instead,
// which follows the row to its newest version. The pairs' second CTEs
// probe only the rows the first left (usually none), so the outcome of
// every locked row is written once and none is lost
// (TestFinishRowWrittenSinceItsSnapshot).
func finishEndSQL(ret string) string {
	gone := func(name, match string) string {
		return name + ` AS (
	DELETE FROM {jobs} j
	USING locked i
	WHERE ` + match + ` AND i.leaves
	RETURNING j.*, i.token AS fin_token, i.outcome AS fin_outcome, i.delay_us AS fin_delay_us,
		i.err AS fin_err, i.ord AS fin_ord, i.fstate AS fin_state
)`
	}
	// The primary-key half of each pair names its rows' IDs as an array
	// too, so that jobs is reached by them whatever the planner believes
	// of its size (the package doc: generic plans).
	return finishChangedSQL(ret) + `, ` + gone("gone_tid", "j.ctid = i.tid") + `, ` +
		gone("gone_id", "j.id = i.id AND j.id = ANY (ARRAY(SELECT id FROM locked WHERE leaves AND id NOT IN (SELECT id FROM gone_tid)))") + `, gone AS (
	SELECT * FROM gone_tid UNION ALL SELECT * FROM gone_id
), archived AS (
	INSERT INTO {history} (` + strings.Join(historyColumns, ", ") + `)
	SELECT ` + finalRowSQL + `
	FROM gone j
	CROSS JOIN LATERAL (SELECT j.fin_outcome AS outcome, j.fin_delay_us AS delay_us, j.fin_err AS err) i
)`
}

// finishChangedSQL returns the CTE changed, which updates the jobs of
// locked that stay in jobs (returning ret): by tuple ID, then, for the
// rows written since the statement's snapshot, by primary key, their IDs
// named as an array too (see finishEndSQL).
func finishChangedSQL(ret string) string {
	changed := func(name, match string) string {
		return name + ` AS (
	UPDATE {jobs} j SET ` + finishSetSQL + `
	FROM locked i
	WHERE ` + match + ` AND NOT i.leaves -- locked checked state and token on the rows it holds
	RETURNING ` + ret + `
)`
	}
	return changed("changed_tid", "j.ctid = i.tid") + `, ` +
		changed("changed_id", "j.id = i.id AND j.id = ANY (ARRAY(SELECT id FROM locked WHERE NOT leaves AND id NOT IN (SELECT id FROM changed_tid)))") + `, changed AS (
	SELECT * FROM changed_tid UNION ALL SELECT * FROM changed_id
)`
}

// finishStateSQL is the state a Finish row moves its job to: retry, snooze
// and release of a job whose cancel was requested become cancelled, and
// otherwise, when its pause was requested, paused.
const finishStateSQL = `(CASE WHEN i.outcome = 1 THEN 'succeeded' WHEN i.outcome = 3 THEN 'dead'
	WHEN i.outcome = 6 OR j.cancel_requested THEN 'cancelled'
	WHEN j.pause_requested THEN 'paused'
	WHEN i.outcome = 2 THEN 'retrying' ELSE 'scheduled' END)`

// rescueStateSQL is the state RescueExpired moves an expired job to: a
// requested cancel wins, then the attempts left decide, then a requested
// pause.
const rescueStateSQL = `(CASE WHEN j.cancel_requested THEN 'cancelled'
	WHEN j.attempt >= j.max_attempts THEN 'dead'
	WHEN j.pause_requested THEN 'paused' ELSE 'retrying' END)`
