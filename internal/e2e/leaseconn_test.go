package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// TestHeartbeatsNeverStarve: 100 workers on a pool of 2 connections,
// whose handlers each take one of those connections and hold it for three
// heartbeat intervals, so that at any time about 98 handlers wait for the
// pool. The heartbeat used to wait in the same queue, time out beat after
// beat, and the host lost the leases of its own running jobs (issue 40:
// "pgstore: extend leases: context deadline exceeded", then "job lease
// lost", 78 times in one run), whose handlers were cancelled and whose
// jobs ran again. With its own connection it loses none: every job runs
// once and succeeds at its first attempt.
func TestHeartbeatsNeverStarve(t *testing.T) {
	// Parallel: for most of its 15 s it waits (the handlers hold the
	// pool's two connections in turn), so the package's other long test
	// (two hosts on the Citus cluster) runs beside it.
	t.Parallel()
	const (
		jobs      = 100
		lease     = 2 * time.Second
		heartbeat = 100 * time.Millisecond
		hold      = 3 * heartbeat
	)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := pgstore.New(context.Background(), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	var (
		mu        sync.Mutex
		runs      = make(map[uuid.UUID]int, jobs)
		lost      []string
		succeeded = make(map[uuid.UUID]bool, jobs)
		all       = make(chan struct{})
		firstLost = make(chan struct{})
	)
	s := newScheduler(t, st, func(c *ax.Config) {
		c.Workers = jobs
		c.LeaseDuration = lease
		c.HeartbeatInterval = heartbeat
		c.Observers = []ax.Observer{ax.ObserverFunc(func(e ax.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case ax.EventLeaseLost:
				lost = append(lost, e.JobID.String())
				if len(lost) == 1 {
					close(firstLost)
				}
			case ax.EventSucceeded:
				succeeded[e.JobID] = true
				if len(succeeded) == jobs {
					close(all)
				}
			}
		})}
	})
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
	_, err = s.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, s.Start(context.Background()))

	select {
	case <-all:
	case <-firstLost:
		t.Fatal("a lease was lost while handlers held the pool")
	case <-time.After(3 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d jobs succeeded; leases lost: %d", len(succeeded), jobs, len(lost))
	}
	t.Logf("%d jobs holding one of 2 pool connections for %s each, in %s", jobs, hold, time.Since(start).Round(time.Millisecond))

	mu.Lock()
	require.Empty(t, lost, "leases lost while handlers held the pool")
	require.Len(t, runs, jobs)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	mu.Unlock()
	var notOnce int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM ax.jobs_all WHERE state <> 'succeeded' OR attempt <> 1`).Scan(&notOnce))
	require.Zero(t, notOnce, "jobs not succeeded at their first attempt")
}
