package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// citusArchivableSQL is the condition of the jobs Archive may move
// (archiveSQL's rule).
const citusArchivableSQL = `(` + archivableSQL + `)
  AND (unique_period = 0 OR unique_key IS NULL OR state = 'cancelled'
       OR finished_at < now() - unique_period * interval '1 second')`

// citusArchiveSQL locks up to $1 jobs of the shard that Archive may move,
// oldest end first.
const citusArchiveSQL = `SELECT id, finished_at FROM {jobs}
WHERE {onshard}` + citusArchivableSQL + `
ORDER BY finished_at
LIMIT $1
FOR UPDATE SKIP LOCKED`

// citusArchiveShardsSQL lists the shards that hold jobs Archive may move:
// one statement over every shard, as citusExpiredShardsSQL for the
// rescue. Every host archives every second; a transaction per shard
// (begin, the lock, commit) cost each host of a 32-shard cluster 96
// round trips a second while no job finished.
const citusArchiveShardsSQL = `SELECT DISTINCT shard FROM {jobs} WHERE ` + citusArchivableSQL

// citusMoveSQL and citusMovedSQL move the locked jobs $1 of the shard to
// the history: an INSERT … SELECT of co-located tables, which Citus runs
// on the shard's worker, then the DELETE. moveSQL's one statement (a
// DELETE … RETURNING feeding the INSERT) would bring every row through
// the coordinator. Each reaches the rows by a probe by primary key per
// ID; the DELETE then by tuple ID ({routed}, placement.go). As one scan
// of the shard for the IDs, a worker whose statistics called the shard
// empty read all of it (TestCitusPlansAreLinear). The INSERT's probe is
// its only reference to jobs: Citus adds shard IS NOT NULL to the rows
// an INSERT … SELECT reads, which, on jobs itself, the worker took for
// an index condition and read the whole shard through.
const (
	citusMoveSQL = `INSERT INTO {history} SELECT j.* FROM unnest($1::uuid[]) AS x(id)
	CROSS JOIN LATERAL (SELECT * FROM {jobs} WHERE {onshard}id = x.id OFFSET 0) j`
	// The rows are locked (citusArchiveSQL, earlier in the
	// transaction), so their tuple IDs hold until it ends.
	citusMovedSQL = `DELETE FROM {jobs} WHERE {routed}ctid = ANY (ARRAY(SELECT p.tid FROM unnest($1::uuid[]) AS x(id)
	CROSS JOIN LATERAL (SELECT ctid AS tid FROM {jobs} WHERE {onshard}id = x.id OFFSET 0) p))`
)

// citusPruneHistorySQL deletes up to $2 jobs of the shard's history that
// finished before $1, oldest first.
const citusPruneHistorySQL = `DELETE FROM {history} WHERE {onshard}id = ANY (ARRAY(
	SELECT id FROM {history}
	WHERE {onshard}finished_at < $1
	ORDER BY finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
))`

// errNewDays means an archive batch ends on days whose history
// partitions are not known to exist: they are created, then the batch
// runs again.
var errNewDays = errors.New("pgstore: history partitions to create")

// Archive moves up to limit finished jobs to the history, shard by shard
// of those that hold some (citusArchiveShardsSQL), each shard's batch in
// one transaction of statements on that shard; see store.Archiver. The
// history's day partitions a batch needs are created first, each in a
// transaction of its own (DDL on a distributed table does not mix with a
// transaction that already wrote to a shard).
func (c *CitusStore) Archive(ctx context.Context, limit int) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if limit < 1 {
		return 0, fmt.Errorf("pgstore: archive: limit must be > 0: %w", store.ErrInvalidParams)
	}
	slots, err := c.slotsWhere(ctx, citusArchiveShardsSQL)
	if err != nil {
		return 0, fmt.Errorf("pgstore: archive: find the shards to archive: %w", err)
	}
	total := 0
	for _, slot := range slots {
		if total >= limit {
			break
		}
		n, err := c.archiveShard(ctx, slot, limit-total)
		total += n
		if err != nil {
			return total, fmt.Errorf("pgstore: archive: %w", err)
		}
	}
	return total, nil
}

func (c *CitusStore) archiveShard(ctx context.Context, slot, limit int) (int, error) {
	p := c.placed[slot]
	for range 3 {
		var (
			moved int
			days  map[time.Time]bool
		)
		err := pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
			var ids []uuid.UUID
			var err error
			ids, days, err = archivable(tx.Query(ctx, p.sql(citusArchiveSQL), limit))
			if err != nil || len(ids) == 0 {
				return err
			}
			c.s.history.mu.Lock()
			for d := range days {
				if c.s.history.days[d] {
					delete(days, d)
				}
			}
			c.s.history.mu.Unlock()
			if len(days) > 0 {
				return errNewDays
			}
			tag, err := tx.Exec(ctx, p.sql(citusMoveSQL), idBytes(ids))
			if err != nil {
				return err
			}
			if tag.RowsAffected() != int64(len(ids)) {
				return fmt.Errorf("moved %d of %d jobs", tag.RowsAffected(), len(ids))
			}
			_, err = tx.Exec(ctx, p.sql(citusMovedSQL), idBytes(ids))
			moved = len(ids)
			return err
		})
		if !errors.Is(err, errNewDays) {
			return moved, err
		}
		for d := range days {
			if err := pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error { return c.s.ensurePartition(ctx, tx, d) }); err != nil {
				return 0, err
			}
			c.s.history.mu.Lock()
			if c.s.history.days == nil {
				c.s.history.days = map[time.Time]bool{}
			}
			c.s.history.days[d] = true
			c.s.history.mu.Unlock()
		}
	}
	return 0, fmt.Errorf("history partitions kept missing")
}

// Prune deletes final jobs that finished more than params.Retention ago,
// shard by shard, in jobs (pgstore's prune statement, placed) and in the
// history, each a statement on the shard, up to params.Limit in all; see
// store.Pruner. The history's emptied day partitions are
// not dropped yet (docs/citus.md).
func (c *CitusStore) Prune(ctx context.Context, params *store.PruneParams) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if params == nil || params.Limit < 1 || params.Retention < 0 {
		return 0, fmt.Errorf("pgstore: prune: limit must be > 0 and retention >= 0: %w", store.ErrInvalidParams)
	}
	cutoff, err := c.s.Now(ctx)
	if err != nil {
		return 0, err
	}
	cutoff = cutoff.Add(-params.Retention)
	total := 0
	for _, p := range c.placed {
		if total >= params.Limit {
			break
		}
		tag, err := p.pool.Exec(ctx, p.q.prune, micros(params.Retention), params.Limit-total)
		total += int(tag.RowsAffected())
		if err != nil {
			return total, fmt.Errorf("pgstore: prune: %w", err)
		}
		if total >= params.Limit {
			break
		}
		tag, err = p.pool.Exec(ctx, p.sql(citusPruneHistorySQL), cutoff, params.Limit-total)
		total += int(tag.RowsAffected())
		if err != nil {
			return total, fmt.Errorf("pgstore: prune history: %w", err)
		}
	}
	return total, nil
}
