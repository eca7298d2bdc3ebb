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
// then again after unkeyedSweepEvery, an interval that doubles after
// every sweep that found nothing, up to unkeyedSweepMax, and drops back
// when one finds some. So such a job waits at most unkeyedSweepMax
// beyond its due time (while the older hosts that wrote it still run,
// their own claims take it too), and a kind whose jobs all have the mark
// pays one sweep a minute per host. A sweep reads the kind's claimable
// jobs once (jobs_claim_idx), the cost every claim paid before.

// unkeyedSweepEvery is the shortest interval between a Store's sweeps of
// one kind, and unkeyedSweepMax the longest.
const (
	unkeyedSweepEvery = 5 * time.Second
	unkeyedSweepMax   = time.Minute
)

// sweepUnkeyedSQL marks the claimable jobs without a key of the kinds $1
// that lack the unkeyed mark. Rows another transaction holds are skipped
// (they are being claimed or changed: the next sweep sees them), so a
// sweep never waits and cannot deadlock.
const sweepUnkeyedSQL = `UPDATE {jobs} SET unkeyed = true WHERE id IN (
	SELECT id FROM {jobs}
	WHERE kind = ANY($1::text[]) AND state IN ('scheduled', 'retrying') AND partition_key = '' AND NOT unkeyed
	FOR UPDATE SKIP LOCKED)
RETURNING kind`

// unkeyedSweeps remembers, per kind, when a Store last swept it and how
// long until the next sweep (host clock: only the intervals matter).
type unkeyedSweeps struct {
	mu    sync.Mutex
	kinds map[string]*unkeyedSweep
}

type unkeyedSweep struct {
	at    time.Time
	every time.Duration
}

// due returns which of kinds are due for a sweep at now.
func (u *unkeyedSweeps) due(kinds []string, now time.Time) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, k := range kinds {
		if w := u.kinds[k]; w == nil || now.Sub(w.at) >= w.every || now.Before(w.at) {
			out = append(out, k)
		}
	}
	return out
}

// swept records kinds as swept at now, marked[k] of kind k's jobs marked:
// a kind whose sweep marked nothing is swept half as often, down to once
// per unkeyedSweepMax; one that had some, every unkeyedSweepEvery again.
func (u *unkeyedSweeps) swept(kinds []string, marked map[string]int, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.kinds == nil {
		u.kinds = map[string]*unkeyedSweep{}
	}
	for _, k := range kinds {
		w := u.kinds[k]
		switch {
		case w == nil || marked[k] > 0:
			w = &unkeyedSweep{every: unkeyedSweepEvery}
		default:
			w.every = min(2*w.every, unkeyedSweepMax)
		}
		w.at = now
		u.kinds[k] = w
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
	rows, _ := conn.Query(ctx, q.sweepUnkeyed, due)
	marked := map[string]int{}
	var kind string
	if _, err := pgx.ForEachRow(rows, []any{&kind}, func() error {
		marked[kind]++
		return nil
	}); err != nil {
		return err
	}
	s.flow.sweeps.swept(due, marked, now)
	return nil
}
