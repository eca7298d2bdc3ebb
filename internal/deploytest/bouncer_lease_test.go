package deploytest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// TestBouncerHeartbeatsNeverStarve: the lease connection (pgstore's own
// connection for lease extension, outside the pool) works through
// PgBouncer in transaction mode, with the pool's query execution mode:
// 40 workers on a pool of 2 connections through the pooler, whose
// handlers each hold one of them for three heartbeat intervals, lose no
// lease, no extension fails but by a timeout, and every job succeeds at
// its first attempt. Before the lease
// connection, the heartbeat waited for the pool behind the handlers and
// the host lost its jobs' leases (issue 40); a lease connection that
// prepared named statements would lose them to "prepared statement does
// not exist" here.
func TestBouncerHeartbeatsNeverStarve(t *testing.T) {
	noLeaks(t)
	const (
		jobs      = 40
		heartbeat = 100 * time.Millisecond
		hold      = 3 * heartbeat
	)
	ctx := context.Background()
	b := startBouncer(t, pgtest.ServerURL())
	pool := poolOn(t, b.url(t, directURL(t)), bouncerMode(), 2)
	st, err := pgstore.New(ctx, pool, pgstore.WithoutMigrate(), pgstore.WithTransactionPooler())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	var (
		mu        sync.Mutex
		runs      = map[uuid.UUID]int{}
		succeeded = map[uuid.UUID]bool{}
		lost      = make(chan uuid.UUID, jobs)
		all       = make(chan struct{})
	)
	logs, recorded := observer.New(zapcore.WarnLevel)
	s, err := ax.New(ax.Config{Store: st, Logger: zap.New(logs), Workers: jobs, LeaseDuration: 2 * time.Second, HeartbeatInterval: heartbeat,
		Observers: []ax.Observer{ax.ObserverFunc(func(e ax.Event) {
			switch e.Kind {
			case ax.EventLeaseLost:
				lost <- e.JobID
			case ax.EventSucceeded:
				mu.Lock()
				succeeded[e.JobID] = true
				if len(succeeded) == jobs {
					close(all)
				}
				mu.Unlock()
			}
		})}})
	require.NoError(t, err)
	require.NoError(t, s.Handle("hold.conn", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		_, err = c.Exec(ctx, `SELECT pg_sleep($1)`, hold.Seconds())
		return err
	})))
	reqs := make([]ax.Request, jobs)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "hold.conn", Payload: i}
	}
	_, err = s.ScheduleMany(ctx, reqs)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	})

	select {
	case <-all:
	case id := <-lost:
		t.Fatalf("job %s lost its lease while handlers held the pool", id)
	case <-time.After(2 * time.Minute):
		t.Fatal("the jobs did not all succeed")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, jobs)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	var notOnce int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all WHERE state <> 'succeeded' OR attempt <> 1`).Scan(&notOnce))
	require.Zero(t, notOnce, "jobs not succeeded at their first attempt")
	// A timed-out extension may happen on a loaded machine; one the
	// pooler refused (a named prepared statement on another server
	// connection) may not.
	for _, e := range recorded.FilterMessage("extend leases failed").All() {
		err, _ := e.ContextMap()["error"].(string)
		require.Contains(t, err, context.DeadlineExceeded.Error(), "an extension failed through the pooler")
	}
	t.Logf("FIGURE bouncer lease connection: %d jobs, pool of 2, handlers holding it %s each, leases lost 0", jobs, hold)
}
