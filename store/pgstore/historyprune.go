package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// What Prune finds of the history, and how long it lets a detach wait
// (issue 41).
//
// A partition is dropped in three statements (dropPartition): a count, a
// DETACH PARTITION … CONCURRENTLY (which commits on its own, outside any
// transaction), and a DROP TABLE. A failure between the detach and the
// drop (a lost connection, a drop that timed out on its lock, the process
// stopping) left a table that pg_inherits no longer lists, and Prune,
// which listed the partitions from pg_inherits only, never saw it again:
// its jobs stayed past the retention for good. historyPartitions also
// lists such tables (leftoverPartitionsSQL), and Prune drops them as it
// drops partitions once their day is past the retention.
//
// DETACH CONCURRENTLY waits, after its first transaction, for every
// transaction holding a lock on jobs_history (a long reader, a CompleteTx
// in a long transaction); FINALIZE waits for every snapshot older than
// its own, holding jobs_history's SHARE UPDATE EXCLUSIVE lock meanwhile.
// Neither had a bound but the caller's context (the ax runtime's 30 s per
// maintenance statement), so while such a transaction lasted the leader's
// maintenance loop (rescue, archive) stalled 30 s of every minute, and a
// FINALIZE waiting made the next day's ATTACH PARTITION (archive, and
// Finish's finishWindow) fail on its 2 s lock timeout. Each now runs for
// at most detachTimeout; one cut short leaves the partition attached (the
// detach's first phase) or pending (its second phase, or FINALIZE), and
// the next Prune tries again.

// defaultDetachTimeout is how long a DETACH CONCURRENTLY or FINALIZE may
// run before it is cancelled. It is below ddlLockTimeout, so that an
// ATTACH queued behind a FINALIZE that waits for an old snapshot gets its
// lock before its own timeout.
const defaultDetachTimeout = time.Second

// historyPart is a day table of the history: a partition of jobs_history
// (attached, a detach pending included), or one left detached.
type historyPart struct {
	day      time.Time
	attached bool
}

// attachedPartitionsSQL lists the partitions of jobs_history ($1).
const attachedPartitionsSQL = `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass`

// leftoverPartitionsSQL lists the tables of the schema $2 that are one of
// AX's history partitions left detached: named as a partition is
// (jobs_history_pYYYYMMDD, checked again by historyPartitions), a plain
// table that is nobody's partition or child, with exactly the columns of
// jobs_history ($1), by name and type, in order. Anything else (another
// schema's table, a table with other columns, an operator's partition of
// another name) is not AX's and is left alone.
const leftoverPartitionsSQL = `WITH cols AS (
	SELECT attrelid, string_agg(attname || ':' || atttypid::text, ',' ORDER BY attnum) AS cols
	FROM pg_attribute WHERE attnum > 0 AND NOT attisdropped GROUP BY attrelid
)
SELECT c.relname FROM pg_class c JOIN cols ON cols.attrelid = c.oid
WHERE c.relnamespace = $2::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
  AND c.relname ~ '^jobs_history_p[0-9]{8}$'
  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)
  AND cols.cols = (SELECT cols FROM cols WHERE attrelid = $1::regclass)`

// historyPartitions returns the day tables of the history, oldest first:
// the partitions of jobs_history, and the tables left detached.
func (s *Store) historyPartitions(ctx context.Context) ([]historyPart, error) {
	var parts []historyPart
	for _, q := range []struct {
		sql      string
		args     []any
		attached bool
	}{
		{attachedPartitionsSQL, []any{s.historyTable()}, true},
		{leftoverPartitionsSQL, []any{s.historyTable(), pgx.Identifier{s.schema}.Sanitize()}, false},
	} {
		rows, _ := s.pool.Query(ctx, q.sql, q.args...)
		var name string
		_, err := pgx.ForEachRow(rows, []any{&name}, func() error {
			if day, ok := partitionDay(name); ok { // else not ours: an operator's partition is left alone
				parts = append(parts, historyPart{day: day, attached: q.attached})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].day.Before(parts[j].day) })
	return parts, nil
}

// partitionDay returns the day a history partition's name stands for, or
// false for a name partitionName does not make.
func partitionDay(name string) (time.Time, bool) {
	if len(name) != len(partitionPrefix)+len(partitionLayout) || name[:len(partitionPrefix)] != partitionPrefix {
		return time.Time{}, false
	}
	day, err := time.Parse(partitionLayout, name[len(partitionPrefix):])
	if err != nil || partitionName(day) != name {
		return time.Time{}, false
	}
	return day, true
}

// errDetachTimeout is the cause of a detach cut short by detachTimeout.
var errDetachTimeout = errors.New("did not finish within its time bound (a long transaction or an old snapshot holds it); the next prune tries again")

// execBounded runs sql (a statement that must run outside a transaction
// block) on a connection of its own, and cancels it after the Store's
// detachTimeout. The bound is a cancel request, not a statement_timeout
// set on the session: a SET would stay on the connection, and through a
// transaction pooler (WithTransactionPooler) on whichever server
// connection it landed on, while a cancel request reaches the statement
// under way wherever it runs. A connection whose cancel was sent is
// closed rather than returned to the pool, so that a late cancel cannot
// reach a later statement.
func (s *Store) execBounded(ctx context.Context, sql string) error {
	s.history.mu.Lock()
	limit := s.history.detachTimeout
	s.history.mu.Unlock()
	if limit <= 0 {
		limit = defaultDetachTimeout
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	pc := c.Conn().PgConn()
	cancelled := make(chan struct{})
	timer := time.AfterFunc(limit, func() {
		defer close(cancelled)
		cctx, cancel := context.WithTimeout(context.Background(), ddlLockTimeout)
		defer cancel()
		_ = pc.CancelRequest(cctx) // if it fails, the statement runs on until ctx ends
	})
	_, err = pc.Exec(ctx, sql).ReadAll()
	if !timer.Stop() {
		<-cancelled
		_ = pc.Close(context.Background()) // Release then drops it
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled
			return fmt.Errorf("%w (cancelled after %v)", errDetachTimeout, limit)
		}
	}
	return err
}
