package ax

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestPeriodicLoopFiresEachTickOnce: the periodic loop wakes at each tick
// of an @every 1s schedule (store clock = host clock here), fires it with
// one store call, and the tick's job is due at the tick, carrying the
// schedule and tick in Job.Schedule and Job.Tick.
func TestPeriodicLoopFiresEachTickOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		r := testRuntime(t, fs, func(c *Config) { c.PollInterval = time.Hour })
		require.NoError(t, r.s.Every("tick", "@every 1s", nil))
		t0 := time.Now()
		r.startPeriodic()
		time.Sleep(3*time.Second + time.Millisecond)
		synctest.Wait()
		r.stopPeriodic()
		jobs, err := fs.Store.(store.Lister).List(t.Context(), &store.ListParams{Kind: "tick", Limit: 10})
		require.NoError(t, err)
		require.Len(t, jobs, 3, "one job per tick")
		require.Equal(t, int64(3), fs.Calls("FirePeriodic"), "one store call per tick")
		for i, j := range jobs {
			tick := t0.Truncate(time.Second).Add(time.Duration(i+1) * time.Second)
			require.True(t, j.RunAt.Equal(tick), "job %d due at %s, want %s", i, j.RunAt, tick)
			job := jobFromRecord(j)
			require.Equal(t, "tick", job.Schedule)
			require.True(t, job.Tick.Equal(tick), "Job.Tick %s, want %s", job.Tick, tick)
			require.True(t, job.ScheduledAt.Equal(tick))
		}
	})
}

// TestPeriodicLoopRetriesStoreErrors: a failing store call is retried at
// the next PollInterval, and the tick it missed fires then (by the
// default misfire policy, once).
func TestPeriodicLoopRetriesStoreErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var failing atomic.Bool
		fs.SetBeforeCall(func(_ context.Context, m string) error {
			if m == "FirePeriodic" && failing.Load() {
				return errors.New("store unreachable")
			}
			return nil
		})
		r := testRuntime(t, fs, func(c *Config) { c.PollInterval = 500 * time.Millisecond })
		require.NoError(t, r.s.Every("tick", "@every 10s", nil))
		r.startPeriodic()
		failing.Store(true)
		time.Sleep(10*time.Second + 100*time.Millisecond) // the first tick fails
		synctest.Wait()
		calls := fs.Calls("FirePeriodic")
		require.Positive(t, calls)
		failing.Store(false)
		time.Sleep(500 * time.Millisecond) // the next poll fires it
		synctest.Wait()
		r.stopPeriodic()
		jobs, err := fs.Store.(store.Lister).List(t.Context(), &store.ListParams{Kind: "tick", Limit: 10})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
	})
}
