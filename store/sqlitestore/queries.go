package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// query names one of the Store's prepared statements.
type query int

// stmts holds the statements prepared on one pool.
type stmts map[query]*sql.Stmt

func (ss *stmts) prepare(ctx context.Context, db *sql.DB, qs []query) error {
	*ss = make(stmts, len(qs))
	for _, q := range qs {
		st, err := db.PrepareContext(ctx, queryText[q])
		if err != nil {
			return fmt.Errorf("%s: %w", strings.Join(strings.Fields(queryText[q]), " "), err)
		}
		(*ss)[q] = st
	}
	return nil
}

func (ss stmts) close() {
	for _, st := range ss {
		_ = st.Close()
	}
}

// The statements.
const (
	qInsert query = iota
	qInsertIfAbsent
	qInsertMany
	qHolder
	qIDExists
	qClaimCandidates
	qClaimNext
	qClaimUpdate
	qLoadRunning
	qLoadID
	qGetSeq
	qGetID
	qSave
	qSaveEnded
	qExtend
	qExtendEnded
	qRescueSelect
	qPrune
	qDeleteSeq
	qCounts
	qFollowUps
	qBatchInsert
	qBatchLoad
	qBatchEnd
	qBatchComplete
	qBatchReopen
	qBatchGet
	qBatchChildren
	qBatchOpenChildren
	qPeriodicGet
	qPeriodicPut
	qPeriodicAll
	qLeaderGet
	qLeaderPut
	qNodeGet
	qNodePut
	qNodeStop
	qNodesAll
	qNodeDelete
	qKindGet
	qKindPut
	qKindDel
	qKindsAll
	qKindDefaultGet
	qKindDefaultPut
	qDueKinds
	qNonceGC
	qNoncePut
	qFlowGet
	qFlowPut
	qFlowDel
	qFlowPartsDel
	qFlowState
	qFlowsAll
	qKindRunning
	qKindPending
	qAllPending
	qPartRunning
	qPartTATGet
	qPartTATPut
	qSeqHead
	qSeqRunning
	qKindHasSeq
	qFlowCands
	qPartBreakerGet
	qPartBreakerPut
	qPartBreakerDel
	qPartBreakersDel
	qPartBreakersAll
	qPartBreakersPrune
	numQueries
)

// jobCols are the jobs columns a jobRow scans, in order.
const jobCols = `seq, id, kind, payload, metadata, state, priority, run_at, scheduled_at, attempt, max_attempts,
	unique_key, unique_global, unique_finished, unique_period, errors, lease_token, lease_expires_at, owner,
	cancel_requested, pause_requested, fence, created_at, attempted_at, finished_at, result, follow_ups, parent, batch, partition_key, sequence_key,
	snoozes, snoozed_at`

// lightCols are jobCols without the large columns (payload, metadata,
// result), which transitions never read: NULL stands in for them.
const lightCols = `seq, id, kind, NULL, NULL, state, priority, run_at, scheduled_at, attempt, max_attempts,
	unique_key, unique_global, unique_finished, unique_period, errors, lease_token, lease_expires_at, owner,
	cancel_requested, pause_requested, fence, created_at, attempted_at, finished_at, NULL, follow_ups, parent, batch, partition_key, sequence_key,
	snoozes, snoozed_at`

// SQL fragments.
const (
	claimableSQL = `('scheduled', 'retrying')`
	finalSQL     = `('succeeded', 'dead', 'cancelled')`
	liveSQL      = `('scheduled', 'retrying', 'paused', 'running')`
	// heldSQL is the predicate of jobs_ukey: the rows holding their ukey.
	heldSQL = `ukey IS NOT NULL AND state <> 'cancelled'
      AND (ukeep = 1 OR state IN ('scheduled', 'retrying', 'paused', 'running'))`
	insertCols = `(id, kind, payload, metadata, state, priority, run_at, scheduled_at, max_attempts,
	unique_key, unique_global, unique_finished, unique_period, ukey, ukeep, created_at, follow_ups, parent, batch,
	partition_key, sequence_key)
	VALUES (?, ?, ?, ?, 'scheduled', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// queryText holds each statement's SQL.
var queryText = [numQueries]string{
	// A row whose ukey is held inserts nothing and returns no row.
	qInsert: `INSERT INTO jobs ` + insertCols + `
	ON CONFLICT (ukey) WHERE ` + heldSQL + ` DO NOTHING`,
	// Then jobs: an ID inserted already is one job.
	qInsertIfAbsent: `INSERT INTO jobs ` + insertCols + `
	ON CONFLICT (id) DO NOTHING`,
	// Rows without a unique key, as a JSON array of
	// [hex id, kind, payload, metadata, priority, run_at, max_attempts,
	// follow-ups, partition key, sequence key] rows; created_at and batch
	// are the call's.
	qInsertMany: `INSERT INTO jobs (id, kind, payload, metadata, state, priority, run_at, scheduled_at, max_attempts,
	created_at, follow_ups, batch, partition_key, sequence_key)
	SELECT unhex(value ->> 0), value ->> 1, value ->> 2, value ->> 3, 'scheduled', value ->> 4, value ->> 5,
	value ->> 5, value ->> 6, ?, value ->> 7, ?, value ->> 8, value ->> 9 FROM json_each(?)`,
	qHolder:   `SELECT id FROM jobs WHERE ukey = ? AND ` + heldSQL,
	qIDExists: `SELECT 1 FROM jobs WHERE id = ?`,

	qClaimCandidates: `SELECT seq, id, run_at FROM jobs
	WHERE kind = ? AND priority = ? AND state IN ` + claimableSQL + `
	ORDER BY run_at, id LIMIT ?`,
	qClaimNext: `SELECT run_at FROM jobs
	WHERE kind = ? AND priority = ? AND state IN ` + claimableSQL + `
	ORDER BY run_at, id LIMIT 1`,
	// The rows to claim come as a JSON array of their seqs. randomblob
	// draws from SQLite's PRNG, seeded from the operating system's
	// randomness: 128 bits per token.
	qClaimUpdate: `UPDATE jobs SET state = 'running', owner = ?, lease_token = randomblob(16), lease_expires_at = ?,
	attempted_at = ?, attempt = attempt + 1, fence = fence + 1, cancel_requested = 0, pause_requested = 0
	WHERE seq IN (SELECT value FROM json_each(?)) RETURNING ` + jobCols,

	// The running rows of the IDs of a JSON array of hex IDs.
	qLoadRunning: `SELECT ` + lightCols + ` FROM jobs
	WHERE id IN (SELECT unhex(value) FROM json_each(?)) AND state = 'running'`,
	qLoadID: `SELECT ` + lightCols + ` FROM jobs WHERE id = ?`,
	qGetSeq: `SELECT ` + jobCols + ` FROM jobs WHERE seq = ?`,
	qGetID:  `SELECT ` + jobCols + ` FROM jobs WHERE id = ?`,
	qSave: `UPDATE jobs SET state = ?, run_at = ?, attempt = ?, max_attempts = ?, errors = ?, lease_token = ?, lease_expires_at = ?,
	cancel_requested = ?, pause_requested = ?, finished_at = ?, snoozes = ?, snoozed_at = ? WHERE seq = ?`,
	// Jobs leaving running, as a JSON array of
	// [seq, state, run_at, attempt, errors, finished_at, result, token,
	// snoozes, snoozed_at] rows. token (hex, or null) is the lease kept by a finish, so that
	// an extension of it reads "finished by its holder"; a rescue clears
	// it.
	qSaveEnded: `UPDATE jobs SET state = l.value ->> 1, run_at = l.value ->> 2, attempt = l.value ->> 3,
	errors = l.value ->> 4, lease_token = unhex(l.value ->> 7), lease_expires_at = NULL, cancel_requested = 0,
	pause_requested = 0, finished_at = l.value ->> 5, result = coalesce(l.value ->> 6, result),
	snoozes = l.value ->> 8, snoozed_at = l.value ->> 9
	FROM json_each(?) AS l WHERE jobs.seq = l.value ->> 0`,
	// The leases come as a JSON array of [hex id, hex token] pairs.
	qExtend: `UPDATE jobs SET lease_expires_at = ?
	FROM (SELECT unhex(value ->> 0) AS id, unhex(value ->> 1) AS token FROM json_each(?)) AS l
	WHERE jobs.id = l.id AND jobs.lease_token = l.token AND jobs.state = 'running'
	RETURNING jobs.id, jobs.lease_token, jobs.cancel_requested`,
	// The leases an extension found not held, as qExtend takes them: those
	// whose job left running under that very token (a finish kept it).
	qExtendEnded: `SELECT jobs.id, jobs.lease_token
	FROM (SELECT unhex(value ->> 0) AS id, unhex(value ->> 1) AS token FROM json_each(?)) AS l
	JOIN jobs ON jobs.id = l.id
	WHERE jobs.lease_token = l.token AND jobs.state <> 'running'`,
	qRescueSelect: `SELECT ` + lightCols + ` FROM jobs
	WHERE state = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at, id LIMIT ?`,
	qPrune: `DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs
	WHERE state IN ` + finalSQL + ` AND finished_at < ? ORDER BY finished_at LIMIT ?)`,
	qDeleteSeq: `DELETE FROM jobs WHERE seq = ?`,
	qCounts:    `SELECT kind, state, n FROM counts WHERE n <> 0`,
	qFollowUps: `SELECT ` + jobCols + ` FROM jobs WHERE parent = ? ORDER BY seq`,

	qBatchInsert: `INSERT INTO batches (id, completion, template, total, pending, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
	qBatchLoad:   `SELECT completion, template, completed FROM batches WHERE id = ?`,
	qBatchEnd: `UPDATE batches SET pending = pending - 1, succeeded = succeeded + ?, dead = dead + ?,
	cancelled = cancelled + ? WHERE id = ? RETURNING pending, completed, reopened`,
	qBatchComplete: `UPDATE batches SET completed = 1, completed_at = ? WHERE id = ?`,
	// A child out of a final state reopens a completed batch. pending is
	// counted again from the others: a batch reopened by older code, which
	// left it unchanged, may hold a stale one.
	qBatchReopen: `UPDATE batches SET succeeded = succeeded - ?1, dead = dead - ?2, cancelled = cancelled - ?3,
	pending = total - (succeeded - ?1) - (dead - ?2) - (cancelled - ?3),
	reopened = reopened | completed, completed = 0, completed_at = NULL WHERE id = ?4`,
	qBatchGet: `SELECT completion, total, succeeded, dead, cancelled, completed, created_at, completed_at
	FROM batches WHERE id = ?`,
	// A batch's children have no parent; its completion jobs do (the child
	// whose end completed it), but for the one of a batch stored before
	// 0004 whose children were all duplicates: that one is left out by ID.
	qBatchChildren: `SELECT ` + jobCols + ` FROM jobs WHERE batch = ? AND id > ? AND id <> ? AND parent IS NULL ORDER BY id LIMIT ?`,
	qBatchOpenChildren: `SELECT ` + lightCols + ` FROM jobs
	WHERE batch = ? AND id <> ? AND parent IS NULL AND state IN ` + liveSQL + ` ORDER BY id`,

	qPeriodicGet: `SELECT name, spec, last_tick, updated_at, paused, template FROM periodic WHERE name = ?`,
	qPeriodicPut: `INSERT INTO periodic (name, spec, last_tick, updated_at, paused, template) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, last_tick = excluded.last_tick,
	updated_at = excluded.updated_at, paused = excluded.paused, template = excluded.template`,
	qPeriodicAll: `SELECT name, spec, last_tick, updated_at, paused, template FROM periodic ORDER BY name`,

	qLeaderGet: `SELECT holder, term, expires_at FROM leaders WHERE name = ?`,
	qLeaderPut: `INSERT INTO leaders (name, holder, term, expires_at) VALUES (?, ?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, term = excluded.term, expires_at = excluded.expires_at`,

	qNodeGet: `SELECT started_at FROM nodes WHERE name = ?`,
	qNodePut: `INSERT INTO nodes (name, version, kinds, key_ids, state, started_at, heartbeat_at, expires_at)
	VALUES (?, ?, ?, ?, 'running', ?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET version = excluded.version, kinds = excluded.kinds, key_ids = excluded.key_ids,
	state = 'running', heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at`,
	qNodeStop:   `UPDATE nodes SET state = 'stopped', expires_at = ? WHERE name = ?`,
	qNodesAll:   `SELECT name, version, kinds, key_ids, state, started_at, heartbeat_at, expires_at FROM nodes`,
	qNodeDelete: `DELETE FROM nodes WHERE name = ?`,

	qKindGet:  `SELECT paused, updated_at FROM kinds WHERE kind = ?`,
	qKindPut:  `INSERT INTO kinds (kind, paused, updated_at) VALUES (?, ?, ?) ON CONFLICT (kind) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`,
	qKindDel:  `DELETE FROM kinds WHERE kind = ?`,
	qKindsAll: `SELECT kind, paused, updated_at FROM kinds WHERE paused <> 0 ORDER BY kind`,

	qKindDefaultGet: `SELECT max_attempts, priority, updated_at FROM kind_defaults WHERE kind = ?`,
	qKindDefaultPut: `INSERT INTO kind_defaults (kind, max_attempts, priority, updated_at) VALUES (?, ?, ?, ?)
	ON CONFLICT (kind) DO UPDATE SET max_attempts = excluded.max_attempts, priority = excluded.priority, updated_at = excluded.updated_at`,
	qDueKinds: `SELECT DISTINCT kind FROM counts WHERE state IN ` + claimableSQL + ` AND n > 0 ORDER BY kind`,

	qNonceGC: `DELETE FROM nonces WHERE nonce IN (SELECT nonce FROM nonces WHERE expires_at <= ? ORDER BY expires_at LIMIT 100)`,
	qNoncePut: `INSERT INTO nonces (nonce, expires_at) VALUES (?, ?)
	ON CONFLICT (nonce) DO UPDATE SET expires_at = excluded.expires_at WHERE nonces.expires_at <= ?`,

	// Flow control (flow.go, claimflow.go).
	qFlowGet: `SELECT config, declared_by, declared_at, breaker, tat FROM flows WHERE kind = ?`,
	qFlowPut: `INSERT INTO flows (kind, config, declared_by, declared_at, breaker, tat) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (kind) DO UPDATE SET config = excluded.config, declared_by = excluded.declared_by,
	declared_at = excluded.declared_at, breaker = excluded.breaker, tat = excluded.tat`,
	qFlowDel:      `DELETE FROM flows WHERE kind = ?`,
	qFlowPartsDel: `DELETE FROM flow_partitions WHERE kind = ?`,
	qFlowState:    `UPDATE flows SET breaker = ?, tat = ? WHERE kind = ?`,
	qFlowsAll: `SELECT f.kind, f.config, f.declared_by, f.declared_at, f.breaker, f.tat,
	coalesce((SELECT n FROM counts WHERE counts.kind = f.kind AND counts.state = 'running'), 0),
	(SELECT count(*) FROM flow_partition_breakers AS b WHERE b.kind = f.kind
		AND json_extract(b.breaker, '$.state') IN ('open', 'half_open'))
	FROM flows AS f ORDER BY f.kind`,
	qKindRunning: `SELECT coalesce((SELECT n FROM counts WHERE kind = ? AND state = 'running'), 0)`,
	qKindPending: `SELECT coalesce(sum(n), 0) FROM counts WHERE kind = ? AND state IN ` + claimableSQL,
	qAllPending:  `SELECT coalesce(sum(n), 0) FROM counts WHERE state IN ` + claimableSQL,
	qPartRunning: `SELECT count(*) FROM jobs WHERE kind = ? AND partition_key = ? AND state = 'running'`,
	qPartTATGet:  `SELECT tat FROM flow_partitions WHERE kind = ? AND key = ?`,
	qPartTATPut: `INSERT INTO flow_partitions (kind, key, tat) VALUES (?, ?, ?)
	ON CONFLICT (kind, key) DO UPDATE SET tat = excluded.tat`,
	qSeqHead: `SELECT seq FROM jobs WHERE kind = ? AND sequence_key = ? AND state IN ` + liveSQL + `
	ORDER BY scheduled_at, id LIMIT 1`,
	// Through the sequence's own rows, not all the kind's running ones.
	qSeqRunning: `SELECT count(*) FROM jobs INDEXED BY jobs_sequence WHERE kind = ? AND sequence_key = ?
	AND state IN ` + liveSQL + ` AND state = 'running'`,
	qKindHasSeq: `SELECT count(*) FROM (SELECT 1 FROM jobs WHERE kind = ? AND sequence_key IS NOT NULL
	AND state IN ` + liveSQL + ` LIMIT 1)`,
	// A page of a kind's claimable jobs of one priority due by a bound,
	// after a (run_at, id) position, in claim order.
	qFlowCands: `SELECT seq, id, run_at, partition_key, sequence_key FROM jobs
	WHERE kind = ? AND priority = ? AND state IN ` + claimableSQL + ` AND run_at <= ? AND (run_at, id) > (?, ?)
	ORDER BY run_at, id LIMIT ?`,

	// Partition breakers (partitionbreaker.go).
	qPartBreakerGet:  `SELECT breaker FROM flow_partition_breakers WHERE kind = ? AND key = ?`,
	qPartBreakerPut:  `INSERT INTO flow_partition_breakers (kind, key, breaker) VALUES (?, ?, ?) ON CONFLICT (kind, key) DO UPDATE SET breaker = excluded.breaker`,
	qPartBreakerDel:  `DELETE FROM flow_partition_breakers WHERE kind = ? AND key = ?`,
	qPartBreakersDel: `DELETE FROM flow_partition_breakers WHERE kind = ?`,
	qPartBreakersAll: `SELECT b.key, b.breaker,
	(SELECT count(*) FROM jobs j WHERE j.kind = b.kind AND j.partition_key = b.key AND j.state = 'running')
	FROM flow_partition_breakers AS b WHERE b.kind = ? ORDER BY b.key`,
	qPartBreakersPrune: `DELETE FROM flow_partition_breakers
	WHERE coalesce(json_extract(breaker, '$.state'), '') NOT IN ('open', 'half_open')
	AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.kind = flow_partition_breakers.kind
		AND j.partition_key = flow_partition_breakers.key AND j.state IN ('scheduled', 'retrying', 'running'))`,
}

// writerQueries and readerQueries are prepared on the writer and the
// readers.
var (
	writerQueries = allQueries()
	readerQueries = []query{qGetID, qCounts, qFollowUps, qBatchGet, qBatchChildren, qPeriodicGet, qPeriodicAll,
		qLeaderGet, qNodesAll, qKindsAll, qKindDefaultGet, qDueKinds, qClaimNext, qBatchLoad, qFlowsAll, qPartBreakersAll, qFlowGet}
)

func allQueries() []query {
	qs := make([]query, numQueries)
	for i := range qs {
		qs[i] = query(i)
	}
	return qs
}
