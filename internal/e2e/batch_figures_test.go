package e2e_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// The figures of batches on PostgreSQL, run by hand (they take a minute
// and measure a shared machine): AX_FIGURES=1 go test ./internal/e2e -run
// TestPGBatchFigures -v.

func figures(t *testing.T) {
	t.Helper()
	if os.Getenv("AX_FIGURES") != "1" {
		t.Skip("figures run with AX_FIGURES=1")
	}
}

func newJobParams(kind string) store.InsertParams {
	return store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: kind, Payload: []byte(`{}`),
		Priority: store.PriorityNormal, MaxAttempts: 3}
}

// TestPGBatchFigures measures, on pgstore: InsertBatch of 10k and 100k
// children against Insert of as many plain jobs; the no-op throughput of
// batch children against plain jobs through one Scheduler; and the lag
// from a batch's last child end to its completion job's claim.
func TestPGBatchFigures(t *testing.T) {
	figures(t)
	t.Run("Insert", func(t *testing.T) {
		for _, n := range []int{10_000, 100_000} {
			st, _ := newPG(t)
			ctx := context.Background()
			plain := make([]store.InsertParams, n)
			for i := range plain {
				plain[i] = newJobParams("plain")
			}
			start := time.Now()
			_, err := st.Insert(ctx, plain)
			require.NoError(t, err)
			tPlain := time.Since(start)
			bp := &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Completion: newJobParams("done")}
			for range n {
				bp.Children = append(bp.Children, newJobParams("child"))
			}
			start = time.Now()
			_, err = st.InsertBatch(ctx, bp)
			require.NoError(t, err)
			tBatch := time.Since(start)
			t.Logf("FIGURE insert %d: plain Insert %s (%.0f jobs/s), InsertBatch %s (%.0f children/s)", n,
				tPlain.Round(time.Millisecond), float64(n)/tPlain.Seconds(), tBatch.Round(time.Millisecond), float64(n)/tBatch.Seconds())
		}
	})
	t.Run("Throughput", func(t *testing.T) {
		const n = 20_000
		run := func(batch, result bool) time.Duration {
			st, _ := newPG(t)
			s := newScheduler(t, st, func(c *ax.Config) { c.Workers = 100 })
			var left atomic.Int64
			left.Store(n)
			done := make(chan struct{})
			noop := ax.HandlerFunc(func(context.Context, *ax.Job) error {
				if left.Add(-1) == 0 {
					close(done)
				}
				return nil
			})
			if result { // the same, recording a small result
				require.NoError(t, ax.HandleResult(s, "noop", func(ctx context.Context, j *ax.Job, n int) (int, error) {
					return n, noop(ctx, j)
				}))
			} else {
				require.NoError(t, s.Handle("noop", noop))
			}
			require.NoError(t, s.Handle("done", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
			reqs := make([]ax.Request, n)
			for i := range reqs {
				reqs[i] = ax.Request{Kind: "noop", Payload: i}
			}
			if batch {
				_, err := s.ScheduleBatch(context.Background(), ax.Batch{Children: reqs, Completion: ax.Request{Kind: "done"}})
				require.NoError(t, err)
			} else {
				_, err := s.ScheduleMany(context.Background(), reqs)
				require.NoError(t, err)
			}
			start := time.Now()
			require.NoError(t, s.Start(context.Background()))
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				t.Fatal("jobs not done")
			}
			took := time.Since(start)
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, s.Stop(stopCtx))
			return took
		}
		// Best of two rounds, interleaved, since the machine is shared.
		tPlain, tBatch, tResult := run(false, false), run(true, false), run(false, true)
		tPlain, tBatch, tResult = min(tPlain, run(false, false)), min(tBatch, run(true, false)), min(tResult, run(false, true))
		perPlain, perBatch := tPlain/time.Duration(n), tBatch/time.Duration(n)
		t.Logf("FIGURE no-op %d, 100 workers: plain %s (%.0f jobs/s), batch children %s (%.0f jobs/s); overhead per child %s",
			n, tPlain.Round(time.Millisecond), float64(n)/tPlain.Seconds(), tBatch.Round(time.Millisecond),
			float64(n)/tBatch.Seconds(), perBatch-perPlain)
		t.Logf("FIGURE no-op %d with a result each: %s (%.0f jobs/s); overhead per result %s", n,
			tResult.Round(time.Millisecond), float64(n)/tResult.Seconds(), tResult/time.Duration(n)-perPlain)
	})
	t.Run("CompletionLag", func(t *testing.T) {
		const batches, children = 100, 20
		st, pool := newPG(t)
		s := newScheduler(t, st, func(c *ax.Config) { c.Workers = 50 })
		done := make(chan uuid.UUID, batches)
		require.NoError(t, s.Handle("child", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
		require.NoError(t, s.Handle("done", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			done <- j.Batch
			return nil
		})))
		require.NoError(t, s.Start(context.Background()))
		var ids []uuid.UUID
		for range batches {
			b := ax.Batch{Completion: ax.Request{Kind: "done"}}
			for i := range children {
				b.Children = append(b.Children, ax.Request{Kind: "child", Payload: i})
			}
			res, err := s.ScheduleBatch(context.Background(), b)
			require.NoError(t, err)
			ids = append(ids, res.ID)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("completion job did not run")
			}
		}
		lags := make([]time.Duration, 0, batches)
		for _, id := range ids {
			var lag time.Duration
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT c.attempted_at - (SELECT max(finished_at) FROM ax.jobs_all
WHERE batch_id = $1 AND id <> b.completion) FROM ax.batches b JOIN ax.jobs_all c ON c.id = b.completion WHERE b.id = $1`, [16]byte(id)).Scan(&lag))
			lags = append(lags, lag)
		}
		sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
		pct := func(p float64) time.Duration { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
		t.Logf("FIGURE completion lag over %d batches of %d (last child's end to completion claim, database clock): p50 %s, p99 %s, max %s",
			batches, children, fmt.Sprint(pct(0.5).Round(100*time.Microsecond)), pct(0.99).Round(100*time.Microsecond), lags[len(lags)-1].Round(100*time.Microsecond))
	})
}
