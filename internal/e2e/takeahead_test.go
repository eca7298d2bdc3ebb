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

// TestPGDefaultHostTakesAhead: a host of the default 100 workers with a
// backlog of 3,000 short jobs on PostgreSQL claims more jobs at a time
// than it has workers (takeahead.go), in fewer than the 30 claims of 100
// it would make without, never runs more than 100 handlers at once, and
// runs every job once.
func TestPGDefaultHostTakesAhead(t *testing.T) {
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
	s := newScheduler(t, st)
	require.NoError(t, s.Handle("short", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		mu.Lock()
		running++
		most = max(most, running)
		runs[j.ID]++
		if len(runs) == jobs && runs[j.ID] == 1 {
			close(done)
		}
		mu.Unlock()
		time.Sleep(50 * time.Microsecond)
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
	require.LessOrEqual(t, most, 100, "handlers at once")
	st.mu.Lock()
	defer st.mu.Unlock()
	t.Logf("jobs per claim: %v", st.took)
	require.NotEmpty(t, st.took)
	require.Greater(t, slices.Max(st.took), 100, "no claim took more jobs than the host has workers")
	require.Less(t, len(st.took), jobs/100, "claims")
}
