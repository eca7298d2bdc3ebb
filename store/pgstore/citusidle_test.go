package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// callTracer records the statements sent with a context that callTracer
// marked (mark): those of one call, whatever else runs on the pool.
type callTracer struct {
	mu   sync.Mutex
	sqls []string
}

type callMark struct{}

func (c *callTracer) mark(ctx context.Context) context.Context {
	return context.WithValue(ctx, callMark{}, true)
}

func (c *callTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if ctx.Value(callMark{}) != nil {
		c.mu.Lock()
		c.sqls = append(c.sqls, data.SQL)
		c.mu.Unlock()
	}
	return ctx
}

func (c *callTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records a marked batch, one round trip, as "batch: N
// statements" followed by its statements prefixed "in batch: ".
func (c *callTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if ctx.Value(callMark{}) != nil {
		c.mu.Lock()
		c.sqls = append(c.sqls, fmt.Sprintf("batch: %d statements", data.Batch.Len()))
		for _, q := range data.Batch.QueuedQueries {
			c.sqls = append(c.sqls, "in batch: "+q.SQL)
		}
		c.mu.Unlock()
	}
	return ctx
}

func (c *callTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *callTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns the statements recorded since the last take, and how many
// of them began a transaction.
func (c *callTracer) take() (sqls []string, begins int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sqls, c.sqls = c.sqls, nil
	for _, s := range sqls {
		if strings.EqualFold(strings.TrimSpace(s), "begin") {
			begins++
		}
	}
	return sqls, begins
}

// requireOneLook fails t unless the call recorded last sent one statement
// and began no transaction: a look over every shard that found no work.
func (c *callTracer) requireOneLook(t *testing.T) {
	t.Helper()
	sqls, begins := c.take()
	require.Equal(t, 1, len(sqls), "no work: one look over every shard, not a transaction per shard; the first statements: %q", sqls[:min(len(sqls), 4)])
	require.Zero(t, begins)
}

// tracedCitus returns a CitusStore on schema over a pool of its own whose
// statements tracer records, for the calls a test marks.
func tracedCitus(t *testing.T, schema string) (*pgstore.CitusStore, *callTracer) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(citustest.URL())
	require.NoError(t, err)
	tracer := &callTracer{}
	cfg.ConnConfig.Tracer = tracer
	traced, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	st, err := pgstore.NewCitus(ctxT(t), traced, pgstore.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st, tracer
}

// TestCitusRescueVisitsOnlyShardsWithExpiredLeases checks the round trips
// of the Citus store's RescueExpired, which every host runs every
// RescueInterval: with no lease expired, one statement (not a transaction
// per shard); with expired leases on two shards and a live one on a
// third, a transaction on each of the two alone, every expired job
// rescued and the live one left running.
func TestCitusRescueVisitsOnlyShardsWithExpiredLeases(t *testing.T) {
	t.Parallel()
	pool, schema, setup := citusStore(t)
	ctx := ctxT(t)
	st, tracer := tracedCitus(t, schema)

	rescued, err := st.RescueExpired(tracer.mark(ctx), 100)
	require.NoError(t, err)
	require.Empty(t, rescued)
	tracer.requireOneLook(t)

	// Slots 1 and 3 hold expired leases (two jobs and one), slot 2 a live
	// one.
	claimOn := func(slot, jobs int, lease time.Duration) []*store.JobRecord {
		for range jobs {
			insertAt(t, pool, schema, setup.SlotValue(slot))
		}
		res, err := setup.SlotStore(slot).Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "k", Limit: 10}},
			Limit: 10, LeaseDuration: lease})
		require.NoError(t, err)
		require.Len(t, res.Jobs, jobs)
		return res.Jobs
	}
	expired := append(claimOn(1, 2, 10*time.Millisecond), claimOn(3, 1, 10*time.Millisecond)...)
	live := claimOn(2, 1, time.Hour)
	require.Eventually(t, func() bool {
		var past bool
		err := pool.QueryRow(ctx, `SELECT now() > $1`, expired[len(expired)-1].LeaseExpiresAt).Scan(&past)
		return err == nil && past
	}, 5*time.Second, 5*time.Millisecond, "the short leases expire by the store's clock")

	rescued, err = st.RescueExpired(tracer.mark(ctx), 100)
	require.NoError(t, err)
	got := map[string]bool{}
	for _, r := range rescued {
		got[r.ID.String()] = true
		require.Equal(t, store.StateRetrying, r.State)
	}
	require.Len(t, got, len(expired))
	for _, j := range expired {
		require.True(t, got[j.ID.String()], "expired job %s rescued", j.ID)
	}
	_, begins := tracer.take()
	require.Equal(t, 2, begins, "a transaction on each shard with expired leases, none elsewhere")
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM `+schema+`.jobs WHERE id = $1`, [16]byte(live[0].ID)).Scan(&state))
	require.Equal(t, "running", state, "the live lease is left alone")
}

// TestCitusArchiveVisitsOnlyShardsWithFinishedJobs checks the round trips
// of the Citus store's Archive, which every host runs every second: with
// no finished job, one statement; with finished jobs on two shards, a
// move on each of the two alone, every finished job moved to the history
// and a due one left.
func TestCitusArchiveVisitsOnlyShardsWithFinishedJobs(t *testing.T) {
	t.Parallel()
	pool, schema, setup := citusStore(t)
	ctx := ctxT(t)
	st, tracer := tracedCitus(t, schema)

	moved, err := st.Archive(tracer.mark(ctx), 100)
	require.NoError(t, err)
	require.Zero(t, moved)
	tracer.requireOneLook(t)

	finishedOn := func(slot, jobs int) {
		for range jobs {
			_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.jobs (shard, id, kind, payload, priority, run_at, scheduled_at, max_attempts,
				state, attempt, attempted_at, finished_at)
				VALUES ($1, gen_random_uuid(), 'k', '{}', 2, now(), now(), 3, 'succeeded', 1, now(), now())`, setup.SlotValue(slot))
			require.NoError(t, err)
		}
	}
	finishedOn(1, 2)
	finishedOn(3, 1)
	insertAt(t, pool, schema, setup.SlotValue(2)) // due, not finished: stays

	moved, err = st.Archive(tracer.mark(ctx), 100)
	require.NoError(t, err)
	require.Equal(t, 3, moved)
	sqls, _ := tracer.take()
	// The history's day partition may be created first, in a transaction
	// of its own: count the moves.
	moves := 0
	for _, s := range sqls {
		if strings.HasPrefix(s, "INSERT INTO") && strings.Contains(s, "jobs_history") {
			moves++
		}
	}
	require.Equal(t, 2, moves, "a move on each shard with finished jobs, none elsewhere")
	var left, history int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.jobs), (SELECT count(*) FROM `+schema+`.jobs_history)`).Scan(&left, &history))
	require.Equal(t, 1, left, "the due job stays in jobs")
	require.Equal(t, 3, history)
}

// TestCitusBulkPicksInOneRoundTrip checks that the Citus store's Bulk
// picks every shard's candidates in one batch (with the transaction's
// timeout and clock), not a statement per shard one after the other, and
// still changes the jobs it picked on every shard.
func TestCitusBulkPicksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	pool, schema, setup := citusStore(t)
	ctx := ctxT(t)
	st, tracer := tracedCitus(t, schema)
	for _, slot := range []int{1, 2, 2} {
		insertAt(t, pool, schema, setup.SlotValue(slot))
	}
	changed, err := st.Bulk(tracer.mark(ctx), &store.BulkParams{Op: store.BulkCancel, Filter: store.JobFilter{Kinds: []string{"k"}}, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 3, changed)
	sqls, _ := tracer.take()
	require.GreaterOrEqual(t, len(sqls), 2)
	require.Equal(t, "begin", sqls[0])
	require.Equal(t, fmt.Sprintf("batch: %d statements", 2+setup.SlotCount()), sqls[1], "the timeout, the clock and a pick per shard, in one round trip")
	picks := 0
	for _, s := range sqls {
		if strings.Contains(s, "SKIP LOCKED") {
			require.True(t, strings.HasPrefix(s, "in batch: "), "a pick outside the batch: %s", s)
			picks++
		}
	}
	require.Equal(t, setup.SlotCount(), picks)
	var cancelled int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.jobs WHERE state = 'cancelled'`).Scan(&cancelled))
	require.Equal(t, 3, cancelled)
}
