package ax_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestJobTellsTheHandler: across retries, a snooze and a RunNow of the
// dead job, Job.ScheduledAt stays the originally scheduled time while
// RunAt moves, and Job.FencingToken grows with every attempt although
// Attempt is given back by the snooze and numbered on by RunNow.
func TestJobTellsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st, func(c *ax.Config) {
			c.RetryPolicy = ax.RetryPolicyFunc(func(int, error) time.Duration { return time.Second })
		})
		type seen struct {
			attempt        int
			fence          int64
			runAt, schedAt time.Time
		}
		var (
			mu    sync.Mutex
			seens []seen
		)
		require.NoError(t, s.Handle("k", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			mu.Lock()
			seens = append(seens, seen{j.Attempt, j.FencingToken, j.RunAt, j.ScheduledAt})
			n := len(seens)
			mu.Unlock()
			require.True(t, j.Tick.IsZero(), "Tick set on a job of no schedule")
			require.Empty(t, j.Schedule)
			switch n {
			case 1:
				return ax.Snooze(time.Second)
			case 2, 3:
				return errors.New("fails")
			}
			return nil
		}), ax.MaxAttempts(2)))
		start(t, s)
		scheduled := time.Now().Add(time.Minute)
		res, err := s.Schedule(t.Context(), "k", nil, ax.At(scheduled))
		require.NoError(t, err)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.Equal(t, store.StateDead, get(t, st, res.ID).State)
		_, err = s.RunNow(t.Context(), res.ID)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, store.StateSucceeded, get(t, st, res.ID).State)

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seens, 4)
		// A snooze gives the attempt back; after RunNow the numbering goes on.
		wantAttempts := []int{1, 1, 2, 3}
		for i, sn := range seens {
			require.Equal(t, wantAttempts[i], sn.attempt, "run %d", i)
			require.Equal(t, int64(i+1), sn.fence, "run %d: the fencing token grows with every attempt", i)
			require.True(t, sn.schedAt.Equal(scheduled), "run %d: ScheduledAt %s moved", i, sn.schedAt)
		}
		require.True(t, seens[0].runAt.Equal(scheduled))
		require.True(t, seens[1].runAt.After(scheduled), "RunAt did not move")
	})
}

// TestPauseWaitsForRunningAttempt: pausing a running job never interrupts
// it; when the attempt fails the job becomes paused instead of retrying
// (and runs again only after Resume), while a paused job whose attempt
// succeeds ends succeeded.
func TestPauseWaitsForRunningAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st, func(c *ax.Config) { c.RetryPolicy = noDelay })
		release := make(chan error)
		runs := make(chan struct{}, 10)
		require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
			runs <- struct{}{}
			select {
			case err := <-release:
				return err
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})))
		start(t, s)
		for _, c := range []struct {
			name   string
			result error
			want   store.State
		}{
			{"failure", errors.New("boom"), store.StatePaused},
			{"success", nil, store.StateSucceeded},
		} {
			res, err := s.Schedule(t.Context(), "k", nil)
			require.NoError(t, err)
			<-runs
			rec, err := s.Pause(t.Context(), res.ID)
			require.NoError(t, err, c.name)
			require.Equal(t, store.StateRunning, rec.State, c.name)
			require.True(t, rec.PauseRequested, c.name)
			time.Sleep(time.Second)
			synctest.Wait()
			require.Equal(t, store.StateRunning, get(t, st, res.ID).State, "%s: the pause interrupted the attempt", c.name)
			release <- c.result
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			require.Equal(t, c.want, get(t, st, res.ID).State, c.name)
		}
		select {
		case <-runs:
			t.Fatal("a paused job ran")
		default:
		}
	})
}

// TestPeriodicJobKnowsItsTick: a periodic job's handler finds the schedule
// and the tick in Job.Schedule and Job.Tick, also on a retry, when RunAt
// has moved.
func TestPeriodicJobKnowsItsTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st, func(c *ax.Config) {
			c.RetryPolicy = ax.RetryPolicyFunc(func(int, error) time.Duration { return 300 * time.Millisecond })
		})
		type seen struct {
			schedule    string
			tick, runAt time.Time
		}
		got := make(chan seen, 4)
		require.NoError(t, s.Handle("report", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			got <- seen{j.Schedule, j.Tick, j.RunAt}
			if j.Attempt == 1 {
				return errors.New("retry me")
			}
			return nil
		})))
		require.NoError(t, s.Every("report", "@every 1h", nil))
		start(t, s)
		first, second := <-got, <-got
		require.Equal(t, "report", first.schedule)
		require.True(t, first.tick.Equal(first.runAt), "first attempt: RunAt %s is the tick %s", first.runAt, first.tick)
		require.True(t, first.tick.Equal(first.tick.Truncate(time.Hour)), "tick %s is not on the hour", first.tick)
		require.True(t, second.tick.Equal(first.tick), "the retry's Tick moved")
		require.True(t, second.runAt.After(first.runAt), "the retry's RunAt did not move")
		require.NoError(t, s.Stop(t.Context()))
	})
}
