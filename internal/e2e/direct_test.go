package e2e_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestPGDirectStartAndClaimsTogether: two hosts on one PostgreSQL
// database, each with 3 workers and 4 goroutines calling Schedule one job
// at a time, at times faster than the workers finish. Jobs start directly while a
// host has a free worker and through claims otherwise (both paths are
// taken); every job runs exactly once, at attempt 1, and no host ever
// runs more than its 3 workers.
func TestPGDirectStartAndClaimsTogether(t *testing.T) {
	const (
		hosts, workers, producers, perProducer = 2, 3, 4, 50
		total                                  = hosts * producers * perProducer
	)
	st, _ := newPG(t)
	ctx := context.Background()
	var (
		mu              sync.Mutex
		runs            = map[int]int{}
		direct, claimed int
		done            = make(chan struct{})
	)
	peaks := make([]atomic.Int64, hosts)
	running := make([]atomic.Int64, hosts)
	scheds := make([]*ax.Scheduler, hosts)
	for h := range hosts {
		s := newScheduler(t, st, func(c *ax.Config) { c.Workers = workers; c.Node = "direct-" + strconv.Itoa(h) })
		require.NoError(t, s.Handle("d", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			n := running[h].Add(1)
			defer running[h].Add(-1)
			for p := peaks[h].Load(); n > p && !peaks[h].CompareAndSwap(p, n); p = peaks[h].Load() {
			}
			time.Sleep(2 * time.Millisecond)
			seq, err := strconv.Atoi(string(j.Payload))
			if err != nil {
				return ax.Permanent(err)
			}
			mu.Lock()
			defer mu.Unlock()
			runs[seq]++
			if j.Attempt != 1 {
				t.Errorf("job %d ran at attempt %d", seq, j.Attempt)
			}
			if j.StartedAt.Equal(j.RunAt) {
				direct++ // claimed in the statement that set its run_at
			} else {
				claimed++
			}
			if direct+claimed == total {
				close(done)
			}
			return nil
		})))
		require.NoError(t, s.Start(ctx))
		scheds[h] = s
	}
	var wg sync.WaitGroup
	for h := range hosts {
		for p := range producers {
			wg.Go(func() {
				for i := range perProducer {
					time.Sleep(time.Duration(p+1) * time.Millisecond) // bursts over the workers, and lulls
					seq := (h*producers+p)*perProducer + i
					if _, err := scheds[h].Schedule(ctx, "d", json.RawMessage(strconv.Itoa(seq))); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("jobs did not run")
	}
	time.Sleep(50 * time.Millisecond) // a second run would show by now
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, total)
	for seq, n := range runs {
		require.Equal(t, 1, n, "job %d ran %d times", seq, n)
	}
	for h := range hosts {
		require.LessOrEqual(t, peaks[h].Load(), int64(workers), "host %d", h)
	}
	// How many started directly depends on timing: a host whose last
	// claim left jobs due (the other host's, locked by its claim) starts
	// none directly until a claim finds nothing waiting.
	t.Logf("started directly: %d, through claims: %d", direct, claimed)
}

// TestPGDirectStart: on an idle host jobs scheduled one at a time start
// directly (claimed by their insert: StartedAt = RunAt, this host the
// owner). A claim in flight holds every free slot, so a job scheduled
// during one (the start-up round, a poll) waits for a claim instead: at
// most a few of 20.
func TestPGDirectStart(t *testing.T) {
	const jobs = 20
	st, pool := newPG(t)
	ctx := context.Background()
	s := newScheduler(t, st, func(c *ax.Config) { c.Node = "direct-host" })
	ran := make(chan *ax.Job, 1)
	require.NoError(t, s.Handle("d", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		ran <- j
		return nil
	})))
	require.NoError(t, s.Start(ctx))
	direct := 0
	for range jobs {
		res, err := s.Schedule(ctx, "d", nil)
		require.NoError(t, err)
		j := <-ran
		require.Equal(t, res.ID, j.ID)
		if !j.StartedAt.Equal(j.RunAt) {
			continue // scheduled during a claim
		}
		direct++
		var owner string
		require.NoError(t, pool.QueryRow(ctx, `SELECT owner FROM ax.jobs_all WHERE id = $1`, [16]byte(j.ID)).Scan(&owner))
		require.Equal(t, "direct-host", owner)
	}
	require.GreaterOrEqual(t, direct, jobs-5, "%d of %d jobs started directly on an idle host", direct, jobs)
}
