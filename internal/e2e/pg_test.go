package e2e_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// newPG returns a pgstore on a fresh database, closed at the end of the
// test.
func newPG(t *testing.T) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	st, err := pgstore.New(context.Background(), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st, pool
}

func newScheduler(t *testing.T, st store.Store, edit ...func(*ax.Config)) *ax.Scheduler {
	t.Helper()
	cfg := ax.Config{Store: st}
	for _, e := range edit {
		e(&cfg)
	}
	s, err := ax.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// TestEightSchedulersRunEveryJobOnce runs 20k jobs through 8 schedulers on
// one database: each job runs exactly once and none is left behind.
func TestEightSchedulersRunEveryJobOnce(t *testing.T) {
	const schedulers, jobs = 8, 20_000
	st, pool := newPG(t)
	var (
		mu   sync.Mutex
		runs = make(map[uuid.UUID]int, jobs)
		left atomic.Int64
		done = make(chan struct{})
	)
	left.Store(jobs)
	for i := range schedulers {
		s := newScheduler(t, st, func(c *ax.Config) { c.Workers = 50 })
		require.NoError(t, s.Handle("noop", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			if left.Add(-1) == 0 {
				close(done)
			}
			return nil
		})))
		require.NoError(t, s.Start(context.Background()), "scheduler %d", i)
	}
	reqs := make([]ax.Request, jobs)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "noop", Payload: i, Options: []ax.ScheduleOption{
			ax.In(time.Duration(i%2000) * time.Millisecond), ax.Priority(ax.PriorityLevel(1 + i%3)),
		}}
	}
	client := newScheduler(t, st) // schedules only; never started
	start := time.Now()
	_, err := client.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%d jobs never ran", left.Load())
	}
	t.Logf("%d jobs through %d schedulers in %s", jobs, schedulers, time.Since(start).Round(time.Millisecond))

	mu.Lock()
	require.Len(t, runs, jobs)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	mu.Unlock()
	// Every outcome reaches the table: wait for the last flushes.
	require.Eventually(t, func() bool {
		var notDone int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM ax.jobs_all WHERE state <> 'succeeded' OR attempt <> 1`).Scan(&notDone))
		return notDone == 0
	}, 30*time.Second, 20*time.Millisecond, "jobs left behind or retried")
}

// TestScheduleTx checks a rolled-back transaction leaves no job and a
// committed one wakes a running scheduler within milliseconds.
func TestScheduleTx(t *testing.T) {
	st, pool := newPG(t)
	s := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = time.Hour }) // only notifications can wake it
	started := make(chan time.Time, 1)
	require.NoError(t, s.Handle("invoice", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		started <- time.Now()
		return nil
	})))
	require.NoError(t, s.Start(context.Background()))
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	rolledBack, err := s.ScheduleTx(ctx, tx, "invoice", map[string]int{"id": 1})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = s.Get(ctx, rolledBack.ID)
	require.ErrorIs(t, err, ax.ErrNotFound, "a rolled-back job must not exist")

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	committed, err := s.ScheduleTx(ctx, tx, "invoice", map[string]int{"id": 2})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1`) // the business write would be here
	require.NoError(t, err)
	commitAt := time.Now()
	require.NoError(t, tx.Commit(ctx))
	select {
	case at := <-started:
		latency := at.Sub(commitAt)
		t.Logf("commit to start: %s", latency)
		require.Less(t, latency, time.Second, "woken by the commit's notification, not by a poll")
	case <-time.After(10 * time.Second):
		t.Fatal("the committed job never started")
	}
	require.Eventually(t, func() bool {
		rec, err := s.Get(ctx, committed.ID)
		return err == nil && rec.State == ax.StateSucceeded
	}, 10*time.Second, 5*time.Millisecond)

	select {
	case <-started:
		t.Fatal("the rolled-back job ran")
	default:
	}
}

// TestFailuresRetryAndDieOnPostgres runs the retry path through the real
// store: two failures, then success; and a permanent failure.
func TestFailuresRetryAndDieOnPostgres(t *testing.T) {
	st, _ := newPG(t)
	s := newScheduler(t, st)
	require.NoError(t, s.Handle("flaky", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		if j.Attempt < 3 {
			return errors.New("downstream unavailable")
		}
		return nil
	}), ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return 10 * time.Millisecond }))))
	require.NoError(t, s.Handle("doomed", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		return ax.Permanent(errors.New("bad input"))
	})))
	require.NoError(t, s.Start(context.Background()))
	ctx := context.Background()
	flaky, err := s.Schedule(ctx, "flaky", nil)
	require.NoError(t, err)
	doomed, err := s.Schedule(ctx, "doomed", nil)
	require.NoError(t, err)
	tests := []struct {
		id      uuid.UUID
		state   store.State
		attempt int
		errors  int
	}{
		{flaky.ID, ax.StateSucceeded, 3, 2},
		{doomed.ID, ax.StateDead, 1, 1},
	}
	for _, tt := range tests {
		var rec *ax.JobRecord
		require.Eventually(t, func() bool {
			rec, err = s.Get(ctx, tt.id)
			return err == nil && rec.State == tt.state
		}, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, tt.attempt, rec.Attempt)
		require.Len(t, rec.Errors, tt.errors)
	}
}
