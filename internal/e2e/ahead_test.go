package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestPGScheduledJobsNeverStartEarly: jobs scheduled ahead on PostgreSQL
// are claimed a little before they fall due (Job.StartedAt = RunAt) and
// held by the host until then: no handler starts before its job's run_at
// by the server's clock. The handler's host time is turned into the
// server's with the most favourable offset the test can measure (the
// upper bound of server − host from the quickest of several readings),
// so the check holds whatever the two clocks say, and is tight when they
// are one machine's.
func TestPGScheduledJobsNeverStartEarly(t *testing.T) {
	const jobs = 200
	st, pool := newPG(t)
	ctx := context.Background()

	// Upper bound of (server clock − host clock): a server reading c
	// taken between host readings h0 and h1 bounds it by c − h0.
	offsetHi, best := time.Duration(0), time.Duration(-1)
	for range 20 {
		var c time.Time
		h0 := time.Now()
		require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&c))
		if rtt := time.Since(h0); best < 0 || rtt < best {
			best, offsetHi = rtt, c.Sub(h0)
		}
	}

	type start struct {
		host time.Time
		job  *ax.Job
	}
	var (
		mu     sync.Mutex
		starts []start
		done   = make(chan struct{})
	)
	s := newScheduler(t, st)
	require.NoError(t, s.Handle("at", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, start{now, j})
		if len(starts) == jobs {
			close(done)
		}
		return nil
	})))
	require.NoError(t, s.Start(ctx))
	base := time.Now().Add(300 * time.Millisecond)
	reqs := make([]ax.Request, jobs)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "at", Options: []ax.ScheduleOption{ax.At(base.Add(time.Duration(i) * 10 * time.Millisecond))}}
	}
	_, err := s.ScheduleMany(ctx, reqs)
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("jobs did not run")
	}

	mu.Lock()
	defer mu.Unlock()
	ahead := 0
	for _, sa := range starts {
		j := sa.job
		require.False(t, j.StartedAt.Before(j.RunAt), "job %s claimed at %s, before its run_at %s", j.ID, j.StartedAt, j.RunAt)
		if j.StartedAt.Equal(j.RunAt) {
			ahead++
		}
		serverStart := sa.host.Add(offsetHi)
		require.False(t, serverStart.Before(j.RunAt), "job %s started %s before its run_at (server clock, offset ≤ %s, reading took %s)",
			j.ID, j.RunAt.Sub(serverStart), offsetHi, best)
	}
	t.Logf("%d of %d jobs claimed ahead of their run_at; server − host clock ≤ %s (reading took %s)", ahead, jobs, offsetHi, best)
	require.Positive(t, ahead, "no job was claimed ahead of its run_at")
}
