package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.Archiver = (*Store)(nil)

// The history of finished jobs (migration 0008): jobs_history, partitioned
// by day of finished_at (UTC), one partition per day named
// jobs_history_pYYYYMMDD, created when a move first needs it and dropped
// by Prune once the whole day is past the retention.

// historyDay is the width of a history partition.
const historyDay = 24 * time.Hour

// partitionPrefix starts the name of every history partition; the rest is
// its day, partitionLayout.
const (
	partitionPrefix = "jobs_history_p"
	partitionLayout = "20060102"
)

// ddlLockTimeout bounds how long creating or dropping a partition waits
// for a lock: a reader of the history (a listing, at most inspectTimeout)
// must not make every later reader queue behind the DDL for long. A
// timeout fails the call; the next one tries again.
const ddlLockTimeout = 2 * time.Second

// Where an archive pass starts walking jobs_finished_idx. Walking from a
// recent time rather than from the start of the index keeps a pass from
// stepping over every entry of the jobs moved since a held snapshot pinned
// the xmin horizon (the entries stay until vacuum can remove them; a walk
// over five minutes of them at 2,000 jobs/s stalled the scheduler for
// seconds in axbench heldxmin). A job can commit its finish after later
// ones, with an older finished_at (a finish inside a long transaction,
// CompleteTx), so passes look back:
//
//   - a Store's first pass walks the whole index;
//   - each pass starts archiveRecheck before the database time of the last
//     pass that moved everything it found;
//   - every archiveSweepEvery, a sweep starts archiveSweepSpan before the
//     database time of the previous sweep.
//
// A job whose finish committed more than about archiveSweepSpan after its
// finished_at stays in jobs until a Store starts (its first pass) or Prune
// deletes it there; reads see it all the same.
const (
	archiveRecheck    = 10 * time.Second
	archiveSweepEvery = time.Minute
	archiveSweepSpan  = 2 * time.Minute
)

// archivePass is what an archive pass walks.
type archivePass int

const (
	passRecent archivePass = iota // from archiveRecheck before the last drained pass
	passSweep                     // from archiveSweepSpan before the last sweep
	passFull                      // the whole index
)

// historyState is what a Store knows of its history: the partitions that
// exist (so a move creates one at most once per process and day) and where
// the next archive pass starts.
type historyState struct {
	mu        sync.Mutex
	days      map[time.Time]bool // partitions known to exist, by day (UTC midnight)
	from      time.Time          // the next recent pass walks jobs finished from here (zero: walk all)
	sweepFrom time.Time          // the next sweep walks from here
	lastSweep time.Time          // when the last sweep (or full walk) drained (host clock)

	// ensuring is held while a Finish creates the partitions it needs
	// (finishWindow); ensureAfter is when it may try again after a failure.
	ensuring    sync.Mutex
	ensureAfter time.Time

	// detachTimeout bounds each DETACH CONCURRENTLY and FINALIZE
	// (historyprune.go); zero is defaultDetachTimeout. Tests shorten it.
	detachTimeout time.Duration
}

// archiveSQL is the statement that picks and locks up to $2 movable jobs
// finished since $1, oldest first. A job with a unique period keeps its key
// until the period has passed since it finished: its window began before
// it was inserted, so it has ended by then (see migration 0008).
const archiveSQL = `SELECT id, finished_at FROM {jobs}
WHERE {onshard}(` + archivableSQL + `) AND finished_at >= $1
  AND (unique_period = 0 OR unique_key IS NULL OR state = 'cancelled'
       OR finished_at < now() - unique_period * interval '1 second')
ORDER BY finished_at
LIMIT $2
FOR UPDATE SKIP LOCKED`

// moveSQL moves the locked jobs $1 from jobs to jobs_history in one
// statement, so that a reader sees each of them in exactly one table.
const moveSQL = `WITH moved AS (
	DELETE FROM {jobs} WHERE {onshard}id = ANY($1::uuid[]) RETURNING *
)
INSERT INTO {history} SELECT * FROM moved`

// restoreSQL returns the statement moving the jobs whose IDs the array
// expression ids yields back from jobs_history to jobs, returning their
// IDs.
func restoreSQL(ids string) string {
	return `WITH back AS (
	DELETE FROM {history} WHERE id = ANY(` + ids + `) RETURNING *
)
INSERT INTO {jobs} SELECT * FROM back RETURNING id`
}

// returnSQL moves the jobs $1 that a restore brought back and that are
// still final (the operation that restored them left them alone) back to
// jobs_history. Their day partitions exist: the restore, in the same
// transaction, deleted them from there, and a Prune's DROP waits for it.
const returnSQL = `WITH moved AS (
	DELETE FROM {jobs} WHERE id = ANY($1::uuid[]) AND state IN ` + finalSQL + ` RETURNING *
)
INSERT INTO {history} SELECT * FROM moved`

// collectIDs returns the IDs rows yields (one uuid column).
func collectIDs(rows pgx.Rows, err error) ([]uuid.UUID, error) {
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	return idsOf(ids), err
}

// A move and a restore carry whole rows (*), never a list of columns: a
// list kept by hand missed unique_window, and every archived job came back
// with its unique key in window 0. jobs and jobs_history have the same
// columns in the same order (jobs_history was made LIKE jobs, and every
// migration that adds a column adds it to both, as jobs_all's SELECT *
// needs too); TestHistoryCarriesEveryColumn checks the catalog for that
// and compares every column of a row across a move and a restore.

// Archive moves up to limit finished jobs from jobs to jobs_history,
// oldest finished first, in one transaction that locks only the rows it
// moves (FOR UPDATE SKIP LOCKED: a job another host is moving or an
// operator is changing is left for the next pass), and returns how many it
// moved; see store.Archiver. Jobs keeping their unique key stay (see
// migration 0008). It creates the day partitions the batch needs. Every
// host may run it at once; the batches do not overlap.
func (s *Store) Archive(ctx context.Context, limit int) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if limit < 1 {
		return 0, fmt.Errorf("pgstore: archive: limit must be > 0: %w", store.ErrInvalidParams)
	}
	from, pass := s.archiveFrom()
	var (
		moved   int
		dbNow   time.Time
		needed  map[time.Time]bool // the days this pass's partitions cover
		skipped bool
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		moved = 0
		// Archives share the archive lock; a Bulk of finished jobs takes
		// it alone (Store.Bulk), and a pass meanwhile moves nothing.
		var got bool
		if err := tx.QueryRow(ctx, `SELECT now(), pg_try_advisory_xact_lock_shared(hashtextextended($1, 0))`,
			s.archiveLockKey()).Scan(&dbNow, &got); err != nil || !got {
			skipped = err == nil
			return err
		}
		ids, days, err := archivable(tx.Query(ctx, s.sql(archiveSQL), from, limit))
		if err != nil || len(ids) == 0 {
			return err
		}
		for d := range days {
			if err := s.ensurePartition(ctx, tx, d); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, s.sql(moveSQL), idBytes(ids))
		moved = int(tag.RowsAffected())
		needed = days
		return err
	})
	if err != nil {
		// A partition this process knew may be gone (another host's
		// Prune dropped it): check them all again next time.
		s.history.mu.Lock()
		s.history.days = nil
		s.history.mu.Unlock()
		return 0, fmt.Errorf("pgstore: archive: %w", err)
	}
	if skipped {
		return 0, nil // a Bulk of finished jobs runs: the next pass moves them
	}
	s.archived(dbNow, pass, moved < limit, needed)
	return moved, nil
}

// archivable reads the rows of an archive pass's pick (ID, finished_at):
// the jobs it locked, and the days of their history partitions.
func archivable(rows pgx.Rows, err error) ([]uuid.UUID, map[time.Time]bool, error) {
	if err != nil {
		return nil, nil, err
	}
	var (
		ids  []uuid.UUID
		days = map[time.Time]bool{}
		id   uuid.UUID
		at   time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{(*[16]byte)(&id), &at}, func() error {
		ids = append(ids, id)
		days[dayOf(at)] = true
		return nil
	})
	return ids, days, err
}

// archiveLockKey names the advisory lock that keeps Archive from moving
// finished jobs while a Bulk picks among them: its pick skips locked
// rows, and a job an archive transaction has deleted from jobs but not
// yet committed to the history is in neither table for it.
func (s *Store) archiveLockKey() string { return "ax.archive." + s.schema }

// archiveFrom returns where this pass walks from, and which pass it is.
func (s *Store) archiveFrom() (time.Time, archivePass) {
	h := &s.history
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.from.IsZero():
		return store.MinTime, passFull
	case time.Since(h.lastSweep) >= archiveSweepEvery:
		return h.sweepFrom, passSweep
	}
	return h.from, passRecent
}

// archived records a committed pass that ran at database time dbNow and
// whose partitions of days now exist. A pass that moved everything it
// found sets where the next ones start (see archiveRecheck); one that
// stopped at its limit leaves them, so the next pass walks the same way.
func (s *Store) archived(dbNow time.Time, pass archivePass, drained bool, days map[time.Time]bool) {
	h := &s.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.days == nil {
		h.days = map[time.Time]bool{}
	}
	for d := range days {
		h.days[d] = true
	}
	if !drained {
		return
	}
	h.from = dbNow.Add(-archiveRecheck)
	if pass != passRecent {
		h.sweepFrom, h.lastSweep = dbNow.Add(-archiveSweepSpan), time.Now()
	}
}

// dayOf returns the UTC day t falls in, as its midnight.
func dayOf(t time.Time) time.Time { return t.UTC().Truncate(historyDay) }

// partitionName returns the name of the history partition of day.
func partitionName(day time.Time) string { return partitionPrefix + day.Format(partitionLayout) }

// ensurePartition creates the history partition of day in tx unless it
// is known to exist or exists. Creators serialize on an advisory lock, so two hosts needing the
// same new day create it once. The partition is created apart and then
// attached: ATTACH PARTITION takes a SHARE UPDATE EXCLUSIVE lock on
// jobs_history, which its readers do not wait for, where CREATE TABLE …
// PARTITION OF would take an ACCESS EXCLUSIVE one.
func (s *Store) ensurePartition(ctx context.Context, tx pgx.Tx, day time.Time) error {
	s.history.mu.Lock()
	known := s.history.days[day]
	s.history.mu.Unlock()
	if known {
		return nil
	}
	name := pgx.Identifier{s.schema, partitionName(day)}.Sanitize()
	var exists bool
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "ax.history."+s.schema); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		// The columns' compression (lz4 for payload and result, migration
		// 0013) is copied where the server knows the clause; without it a
		// partition takes the server's default method.
		var version int
		if err := tx.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
			return err
		}
		like := "INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
		if version >= likeCompressionVersion {
			like += " INCLUDING COMPRESSION"
		}
		// The timeout stays for the rest of the transaction: the move
		// after this waits for no lock either (its rows are locked).
		// One statement each: Citus runs DDL of a distributed table
		// through the extended protocol, one command per statement.
		for _, ddl := range []string{
			fmt.Sprintf(`SET LOCAL lock_timeout = %d`, ddlLockTimeout.Milliseconds()),
			fmt.Sprintf(`CREATE TABLE %s (LIKE %s %s)`, name, s.historyTable(), like),
			fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, s.historyTable(), name,
				day.Format(time.RFC3339), day.Add(historyDay).Format(time.RFC3339)),
		} {
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("create history partition %s: %w", partitionName(day), err)
			}
		}
	}
	return nil // remembered by archived, once tx has committed
}

// pruneHistory deletes the history past retention: it drops each
// partition whose whole day is past it, counting its rows, then deletes
// up to limit rows from the partition the boundary falls in. It returns
// how many jobs it removed, which can exceed limit when it drops a
// partition. A day's table left detached by an earlier drop that stopped
// between its DETACH and its DROP (historyprune.go) is dropped the same
// way once its day is past the retention.
func (s *Store) pruneHistory(ctx context.Context, retention time.Duration, limit int) (int, error) {
	var cutoff time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now() - $1::bigint * interval '1 microsecond'`, micros(retention)).Scan(&cutoff); err != nil {
		return 0, err
	}
	parts, err := s.historyPartitions(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, p := range parts {
		if p.day.Add(historyDay).After(cutoff) {
			if p.day.After(cutoff) || !p.attached {
				continue // within the retention (a detached one: left alone)
			}
			// The partition the boundary falls in: its expired rows.
			tag, err := s.pool.Exec(ctx, s.pruneHistorySQL(p.day), cutoff, limit)
			total += int(tag.RowsAffected())
			if err != nil {
				return total, err
			}
			continue
		}
		n, err := s.dropPartition(ctx, p)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// pruneHistorySQL returns the statement deleting up to $2 jobs of day's
// partition that finished before $1, oldest first. It names the partition
// and deletes by tuple ID (unique within one table), so that it touches
// nothing else whatever plan the statistics of a young partition lead to.
func (s *Store) pruneHistorySQL(day time.Time) string {
	part := pgx.Identifier{s.schema, partitionName(day)}.Sanitize()
	return `DELETE FROM ` + part + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + part + `
	WHERE finished_at < $1
	ORDER BY finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
))`
}

// dropPartition drops the history partition p (attached, or left
// detached) and returns how many jobs it held.
//
// On PostgreSQL 14 and later an attached partition is first detached
// CONCURRENTLY: that takes a SHARE UPDATE EXCLUSIVE lock on jobs_history,
// which Finish's inserts and the history's readers do not wait for, and
// then waits for the transactions that may still see the partition. A
// plain DROP TABLE of a partition takes an ACCESS EXCLUSIVE lock on
// jobs_history, and while it queued behind one reader every Finish
// queued behind it, for up to ddlLockTimeout. The drop of the detached
// table then locks that table only. A detach interrupted (a cancelled
// context, a lost connection, its time bound: see detachTimeout) leaves
// the partition pending; the next prune finishes it (FINALIZE). A detach
// that committed without the drop after it leaves a detached table, which
// the next prune finds (leftoverPartitionsSQL) and drops.
func (s *Store) dropPartition(ctx context.Context, p historyPart) (int, error) {
	name := pgx.Identifier{s.schema, partitionName(p.day)}.Sanitize()
	// Counted before the drop takes its lock, so that readers of the
	// history wait only for the drop itself. Nothing moves into a day past
	// the retention; a run-now of one of its jobs meanwhile (moving it
	// back to jobs) leaves the count one too high.
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+name).Scan(&n)
	if err == nil && p.attached {
		err = s.detachPartition(ctx, name)
	}
	if err == nil {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d; DROP TABLE %s`, ddlLockTimeout.Milliseconds(), name))
			return err
		})
	}
	if err != nil {
		return 0, fmt.Errorf("drop history partition %s: %w", partitionName(p.day), err)
	}
	s.history.mu.Lock()
	delete(s.history.days, p.day)
	s.history.mu.Unlock()
	return n, nil
}

// likeCompressionVersion is the first server_version_num whose CREATE
// TABLE … LIKE takes INCLUDING COMPRESSION.
const likeCompressionVersion = 140000

// detachConcurrentlyVersion is the first server_version_num with ALTER
// TABLE … DETACH PARTITION … CONCURRENTLY.
const detachConcurrentlyVersion = 140000

// detachPartition detaches the history partition name (quoted,
// schema-qualified) without blocking the history's writers, or does
// nothing on a server too old to (the drop then takes the parent's lock
// itself). Each statement runs alone, outside a transaction block, as
// DETACH CONCURRENTLY requires, so it also works through a transaction
// pooler. Each is bounded by detachTimeout (execBounded).
func (s *Store) detachPartition(ctx context.Context, name string) error {
	var version int
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return err
	}
	if version < detachConcurrentlyVersion {
		return nil
	}
	var pending bool
	err := s.pool.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass AND inhparent = $2::regclass`,
		name, s.historyTable()).Scan(&pending)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // detached already (by another host's prune)
	case err != nil:
		return err
	case pending:
		return s.execBounded(ctx, `ALTER TABLE `+s.historyTable()+` DETACH PARTITION `+name+` FINALIZE`)
	}
	return s.execBounded(ctx, `ALTER TABLE `+s.historyTable()+` DETACH PARTITION `+name+` CONCURRENTLY`)
}

// historyTable returns the schema-qualified, quoted jobs_history table.
func (s *Store) historyTable() string { return pgx.Identifier{s.schema, "jobs_history"}.Sanitize() }

// allJobsTable returns the schema-qualified, quoted view over jobs and
// jobs_history.
func (s *Store) allJobsTable() string { return pgx.Identifier{s.schema, "jobs_all"}.Sanitize() }
