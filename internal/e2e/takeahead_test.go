package e2e_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// claimSizes is a pgstore.Store that records how many jobs each claim
// took; every other method is pgstore's own.
type claimSizes struct {
	*pgstore.Store
	mu   sync.Mutex
	took []int
}

func (c *claimSizes) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	res, err := c.Store.Claim(ctx, p)
	if res != nil && len(res.Jobs) > 0 {
		c.mu.Lock()
		c.took = append(c.took, len(res.Jobs))
		c.mu.Unlock()
	}
	return res, err
}

// TestPGHostTakesAhead: a host with a backlog of 3,000 short jobs on
// PostgreSQL claims more jobs at a time than its workers and than 100
// (takeahead.go), in fewer than the 30 claims of 100 it would make
// without, never runs more handlers at once than its workers, and runs
// every job once: a host of the default 100 workers with handlers of
// 50 µs, and a host of 25 whose handlers return at once (its workers
// start the whole hold of 400 within aheadDrain).
func TestPGHostTakesAhead(t *testing.T) {
	cases := []struct {
		name    string
		workers int
		handler time.Duration
	}{
		{"the default width", 100, 50 * time.Microsecond},
		{"a small host with handlers that return at once", 25, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { testPGHostTakesAhead(t, c.workers, c.handler) })
	}
}

func testPGHostTakesAhead(t *testing.T, workers int, handler time.Duration) {
	const jobs = 3000
	pg, _ := newPG(t)
	st := &claimSizes{Store: pg}
	ctx := context.Background()
	var (
		mu            sync.Mutex
		runs          = make(map[uuid.UUID]int, jobs)
		running, most int
		done          = make(chan struct{})
	)
	s := newScheduler(t, st, func(c *ax.Config) { c.Workers = workers })
	require.NoError(t, s.Handle("short", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		mu.Lock()
		running++
		most = max(most, running)
		runs[j.ID]++
		if len(runs) == jobs && runs[j.ID] == 1 {
			close(done)
		}
		mu.Unlock()
		if handler > 0 {
			time.Sleep(handler)
		}
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})))
	reqs := make([]ax.Request, jobs)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "short"}
	}
	_, err := s.ScheduleMany(ctx, reqs)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("jobs did not run")
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(stop))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, jobs)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	require.LessOrEqual(t, most, workers, "handlers at once")
	st.mu.Lock()
	defer st.mu.Unlock()
	t.Logf("jobs per claim: %v", st.took)
	require.NotEmpty(t, st.took)
	require.Greater(t, slices.Max(st.took), max(workers, 100), "no claim took more jobs than the host has workers, or than 100")
	require.Less(t, len(st.took), jobs/100, "claims")
}

// TestPGHandsBackJobsWhenHandlersTurnSlow: on PostgreSQL, a host of 5
// workers takes jobs ahead while its handlers are short; then they hang.
// Soon it holds only the 5 jobs whose handlers hang: those it took ahead
// are handed back unstarted (takeahead.go, handBackStaleAhead), and a
// second host started then runs them while the first one's handlers
// still hang. Every job runs once, at attempt 1.
func TestPGHandsBackJobsWhenHandlersTurnSlow(t *testing.T) {
	const fast, jobs = 200, 400
	pg, pool := newPG(t)
	st := &claimSizes{Store: pg}
	ctx := context.Background()
	var (
		mu      sync.Mutex
		runs    = make(map[uuid.UUID]int, jobs)
		onA     int
		release = make(chan struct{})
	)
	defer close(release) // before the schedulers stop (Cleanup)
	count := func(j *ax.Job) {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
	}
	a := newScheduler(t, st, func(c *ax.Config) { c.Node, c.Workers = "a", 5 })
	require.NoError(t, a.Handle("turns", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		count(j)
		mu.Lock()
		onA++
		hang := onA > fast
		mu.Unlock()
		if hang {
			<-release
		} else {
			time.Sleep(time.Millisecond)
		}
		return nil
	})))
	reqs := make([]ax.Request, jobs)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "turns"}
	}
	_, err := a.ScheduleMany(ctx, reqs)
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))

	heldByA := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs WHERE state = 'running' AND owner = 'a'`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return onA == fast+5
	}, time.Minute, 10*time.Millisecond, "host a's handlers hang")
	require.Eventually(t, func() bool { return heldByA() == 5 }, 10*time.Second, 20*time.Millisecond,
		"host a holds only the jobs whose handlers hang")
	st.mu.Lock()
	require.Greater(t, slices.Max(st.took), 5, "host a took jobs ahead")
	st.mu.Unlock()

	b := newScheduler(t, pg, func(c *ax.Config) { c.Node, c.Workers = "b", 20 })
	require.NoError(t, b.Handle("turns", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		count(j)
		return nil
	})))
	require.NoError(t, b.Start(ctx))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == jobs
	}, time.Minute, 10*time.Millisecond, "host b runs what host a handed back while a's handlers hang")
	require.Equal(t, 5, heldByA())
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	var notFirst int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all WHERE attempt > 1`).Scan(&notFirst))
	require.Zero(t, notFirst, "a job handed back unstarted counts no attempt")
}
