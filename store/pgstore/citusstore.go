package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// The interfaces CitusStore implements: the core queue, with its history,
// listings, counts, cluster registry and wake-ups. What it lacks (flow
// control, follow-ups and results, batches, periodic jobs, the operator's
// inspector, early starts) the runtime refuses at registration.
var (
	_ store.Store        = (*CitusStore)(nil)
	_ store.Notifier     = (*CitusStore)(nil)
	_ store.Archiver     = (*CitusStore)(nil)
	_ store.Pruner       = (*CitusStore)(nil)
	_ store.Lister       = (*CitusStore)(nil)
	_ store.Counter      = (*CitusStore)(nil)
	_ store.Leaser       = (*CitusStore)(nil)
	_ store.NodeRegistry = (*CitusStore)(nil)
	_ store.Closer       = (*CitusStore)(nil)
)

// slotOfID is the slot of a job without a unique key: its ID's, so that
// an ID inserted twice meets the primary key of one shard.
func (c *CitusStore) slotOfID(id uuid.UUID) int {
	h := fnv.New32a()
	h.Write(id[:])
	return int(h.Sum32() % uint32(len(c.placed)))
}

// slotOfKey is the slot of a job with a unique key: the key's in its
// scope, so that every job that could hold the key is on one shard, whose
// unique index then keeps the key unique across the cluster.
func (c *CitusStore) slotOfKey(k scopedKey) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s", k.space, k.period, k.window, k.key)
	return int(h.Sum32() % uint32(len(c.placed)))
}

// check returns store.ErrClosed once the store is closed.
func (c *CitusStore) check() error { return c.s.check() }

// Now returns the coordinator's clock (statement_timestamp()): the store
// clock of every host.
func (c *CitusStore) Now(ctx context.Context) (time.Time, error) { return c.s.Now(ctx) }

// Get returns the job with the given ID, wherever it is (jobs or the
// history, any shard), or an error wrapping store.ErrNotFound. It reads
// every shard: a job's ID names its shard only when it has no unique key.
func (c *CitusStore) Get(ctx context.Context, id uuid.UUID) (*store.JobRecord, error) {
	return c.s.Get(ctx, id)
}

// earliest returns the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ExtendLeases extends the leases shard by shard: a lease's token names
// its slot (tokenSlot), so each shard's leases go in one statement on it,
// all on the store's one lease connection (a connection per shard would
// cost every host one per shard).
func (c *CitusStore) ExtendLeases(ctx context.Context, params *store.ExtendParams) (*store.ExtendResult, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if params == nil || params.Duration <= 0 {
		return nil, fmt.Errorf("pgstore: extend leases: duration must be > 0: %w", store.ErrInvalidParams)
	}
	bySlot := map[int][]store.Lease{}
	var stray []store.Lease
	for _, l := range params.Leases {
		slot := tokenSlot(l.Token)
		if slot >= len(c.placed) {
			stray = append(stray, l) // no claim of this store gave it
			continue
		}
		bySlot[slot] = append(bySlot[slot], l)
	}
	parts := make([]extendPart, 0, len(bySlot))
	for _, slot := range sortedSlots(bySlot) {
		parts = append(parts, extendPart{sql: c.placed[slot].q.extend, leases: bySlot[slot]})
	}
	res, err := c.s.extendParts(ctx, parts, params.Duration)
	if err != nil {
		return nil, err
	}
	res.Lost = append(res.Lost, stray...)
	return res, nil
}

// Subscribe delivers the wake-ups the store's hosts send through the
// coordinator (every notification of the Citus store is sent there, never
// from a worker); see store.Notifier.
func (c *CitusStore) Subscribe(fn func(store.Notification)) (unsubscribe func()) {
	return c.s.Subscribe(fn)
}

// List lists jobs of every shard, in ID order; see store.Lister.
func (c *CitusStore) List(ctx context.Context, params *store.ListParams) ([]*store.JobRecord, error) {
	return c.s.List(ctx, params)
}

// CountJobs counts the jobs of every shard by kind and state; see
// store.Counter.
func (c *CitusStore) CountJobs(ctx context.Context) ([]store.StateCount, error) {
	return c.s.CountJobs(ctx)
}

// AcquireLeader takes or renews the leader lease, a row of a plain table
// of the coordinator; see store.Leaser.
func (c *CitusStore) AcquireLeader(ctx context.Context, params *store.LeaderParams) (*store.Leadership, error) {
	return c.s.AcquireLeader(ctx, params)
}

// ReleaseLeader frees the leader lease; see store.Leaser.
func (c *CitusStore) ReleaseLeader(ctx context.Context, name, holder string) (bool, error) {
	return c.s.ReleaseLeader(ctx, name, holder)
}

// HeartbeatNode registers the node or records its heartbeat in the node
// registry, a plain table of the coordinator; see store.NodeRegistry.
func (c *CitusStore) HeartbeatNode(ctx context.Context, params *store.NodeParams) error {
	return c.s.HeartbeatNode(ctx, params)
}

// StopNode marks the node stopped; see store.NodeRegistry.
func (c *CitusStore) StopNode(ctx context.Context, name string) (bool, error) {
	return c.s.StopNode(ctx, name)
}

// ListNodes returns the registered nodes; see store.NodeRegistry.
func (c *CitusStore) ListNodes(ctx context.Context) ([]*store.NodeRecord, error) {
	return c.s.ListNodes(ctx)
}

// ReapNodes marks dead and removes expired nodes; see store.NodeRegistry.
func (c *CitusStore) ReapNodes(ctx context.Context, params *store.ReapParams) (dead, removed []string, err error) {
	return c.s.ReapNodes(ctx, params)
}

// JobShard returns the slot of the job's shard, or an error wrapping
// store.ErrNotFound: for operators and tests that look at placement.
func (c *CitusStore) JobShard(ctx context.Context, id uuid.UUID) (int, error) {
	var value int32
	err := c.s.pool.QueryRow(ctx, c.s.sql(citusFindSQL), [16]byte(id)).Scan(&value, new(bool))
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pgstore: job %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: find the shard of job %s: %w", id, err)
	}
	return c.slotByValue[value], nil
}
