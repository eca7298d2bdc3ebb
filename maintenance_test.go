package ax

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestJitterBounds: rescue intervals are spread over ±20%.
func TestJitterBounds(t *testing.T) {
	lo, hi := time.Hour, time.Duration(0)
	for range 10000 {
		d := jitter(time.Second)
		lo, hi = min(lo, d), max(hi, d)
	}
	require.GreaterOrEqual(t, lo, 800*time.Millisecond)
	require.LessOrEqual(t, hi, 1200*time.Millisecond)
	require.Less(t, lo, 820*time.Millisecond, "the spread does not reach its low end")
	require.Greater(t, hi, 1180*time.Millisecond, "the spread does not reach its high end")
}

// TestInBatchesIsBounded: a maintenance pass makes at most
// maintenanceRounds calls of maintenanceBatch rows, stops early on a short
// batch or a failure, and stops at once when Stop begins.
func TestInBatchesIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := testRuntime(t, memstore.New())
		var calls atomic.Int64
		full := func(context.Context) (int, error) { calls.Add(1); return maintenanceBatch, nil }
		require.Equal(t, maintenanceRounds*maintenanceBatch, r.inBatches("full", full))
		require.Equal(t, int64(maintenanceRounds), calls.Load())

		calls.Store(0)
		short := func(context.Context) (int, error) { calls.Add(1); return 3, nil }
		require.Equal(t, 3, r.inBatches("short", short))
		require.Equal(t, int64(1), calls.Load())

		calls.Store(0)
		hang := func(ctx context.Context) (int, error) {
			calls.Add(1)
			<-ctx.Done()
			return 0, ctx.Err()
		}
		go func() {
			time.Sleep(time.Second)
			r.cancelLife()
		}()
		begin := time.Now()
		require.Zero(t, r.inBatches("hang", hang))
		require.Equal(t, time.Second, time.Since(begin), "a pass outlived Stop")
		require.Equal(t, int64(1), calls.Load())
	})
}

// TestArchiveRunsOnEveryHost: a host that is not the leader moves
// finished jobs to the store's history every second (±20%), in batches
// until one moves less than a batch.
func TestArchiveRunsOnEveryHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var backlog atomic.Int64           // the hook runs on the maintenance goroutine
		backlog.Store(2*archiveBatch + 10) // two full batches and a short one
		fs.OnArchive = func(limit int) (int, error) {
			n := min(int64(limit), backlog.Load())
			backlog.Add(-n)
			return int(n), nil
		}
		r := testRuntime(t, fs)
		r.cluster.leading.Store(false) // a follower
		go r.maintain()
		time.Sleep(archiveInterval * 6 / 5)
		synctest.Wait()
		require.Equal(t, int64(3), fs.Calls("Archive"), "one pass: batches until a short one")
		require.Zero(t, backlog.Load())
		time.Sleep(10 * archiveInterval)
		synctest.Wait()
		calls := fs.Calls("Archive")
		require.GreaterOrEqual(t, calls, int64(3+10*5/6), "a pass every second ±20%%")
		require.LessOrEqual(t, calls, int64(3+10*5/4+1))
		r.cancelLife()
		<-r.maintDone
	})
}

// TestRescueRunsOnEveryHost: a host that is not the leader rescues
// expired leases every RescueInterval (±20%), and wakes its claimer for
// the jobs it rescued; only the leader prunes.
func TestRescueRunsOnEveryHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		r := testRuntime(t, fs, func(c *Config) { c.RescueInterval = 100 * time.Millisecond })
		r.cluster.leading.Store(false) // a follower
		// A job claimed by a node that died: its lease has expired.
		claimAttempts(t, testRuntime(t, fs), fs, "k", 1, time.Millisecond)
		time.Sleep(2 * time.Millisecond)
		go r.maintain()
		time.Sleep(121 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, int64(1), fs.Calls("RescueExpired"))
		counts, err := fs.Store.(store.Counter).CountJobs(t.Context())
		require.NoError(t, err)
		require.Equal(t, []store.StateCount{{Kind: "k", State: store.StateRetrying, Count: 1}}, counts)
		select {
		case <-r.wakeCh:
		default:
			t.Fatal("the rescue did not wake the claimer")
		}
		time.Sleep(2 * pruneInterval)
		synctest.Wait()
		require.Zero(t, fs.Calls("Prune"), "a follower pruned")
		require.Greater(t, fs.Calls("RescueExpired"), int64(2*pruneInterval/(120*time.Millisecond)))
		r.cancelLife()
		<-r.maintDone
	})
}
