package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// A kind with a partition source claims partition by partition (flow
// claim), and its jobs without a key form the partition "". Those jobs
// carry the unkeyed mark (migration 0020), written with the row from Go
// (partitionKeys) and by ax_insert_template, and the claim reads the
// partition "" through jobs_unkeyed_idx, which holds only them. Before, it
// read them through jobs_claim_idx, over every claimable job of the kind:
// one partition's held backlog was read by every claim of the kind, and
// the other partitions' jobs started later the deeper it grew (issue 40).
//
// A job can still lack the mark: written by older code during a rolling
// deploy, before its kind got a partition source, or by a host whose view
// of the kinds' settings (flowCacheTTL) was not yet current. The flow
// claim sweeps them: at a Store's first claim of a partitioned kind, and
// then at most every unkeyedSweepEvery, it marks the kind's claimable
// jobs in the partition "" that lack the mark, so such a job waits at
// most that long beyond its due time. The sweep reads the kind's
// claimable jobs once (jobs_claim_idx), the cost every claim paid before.

// unkeyedSweepEvery is how often a Store sweeps each partitioned kind it
// claims.
const unkeyedSweepEvery = 5 * time.Second

// sweepUnkeyedSQL marks the claimable jobs without a key of the kinds $1
// that lack the unkeyed mark. Rows another transaction holds are skipped
// (they are being claimed or changed: the next sweep sees them), so a
// sweep never waits and cannot deadlock.
const sweepUnkeyedSQL = `UPDATE {jobs} SET unkeyed = true WHERE id IN (
	SELECT id FROM {jobs}
	WHERE kind = ANY($1::text[]) AND state IN ('scheduled', 'retrying') AND partition_key = '' AND NOT unkeyed
	FOR UPDATE SKIP LOCKED)`

// unkeyedSweeps remembers when a Store last swept each kind (host clock:
// only the interval matters).
type unkeyedSweeps struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due returns which of kinds are due for a sweep at now.
func (u *unkeyedSweeps) due(kinds []string, now time.Time) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, k := range kinds {
		if at, ok := u.last[k]; !ok || now.Sub(at) >= unkeyedSweepEvery || now.Before(at) {
			out = append(out, k)
		}
	}
	return out
}

// swept records kinds as swept at now.
func (u *unkeyedSweeps) swept(kinds []string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last == nil {
		u.last = map[string]time.Time{}
	}
	for _, k := range kinds {
		u.last[k] = now
	}
}

// sweepUnkeyed runs the sweep on conn, in a statement of its own before
// the claim's transaction, for the kinds of the claim that have a
// partition source (in snap) and are due. The claim that follows sees
// what it marked.
func (s *Store) sweepUnkeyed(ctx context.Context, conn *pgx.Conn, q *flowQueries, snap flowSnapshot, kinds []*claimKind) error {
	var parted []string
	for _, k := range kinds {
		if cfg := snap.kinds[k.kind]; cfg != nil && !cfg.Partition.IsZero() {
			parted = append(parted, k.kind)
		}
	}
	if len(parted) == 0 {
		return nil
	}
	now := time.Now()
	due := s.flow.sweeps.due(parted, now)
	if len(due) == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, q.sweepUnkeyed, due); err != nil {
		return err
	}
	s.flow.sweeps.swept(due, now)
	return nil
}
