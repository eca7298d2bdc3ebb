package ax_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/stretchr/testify/require"
)

// TestSchedulerStats checks a Scheduler's Stats after a scripted run.
func TestSchedulerStats(t *testing.T) {
	started := newEventCounter(ax.EventStarted)
	finished := newEventCounter(ax.EventSucceeded, ax.EventDead)
	s := newScheduler(t, newMemstore(), func(c *ax.Config) {
		c.Observers = []ax.Observer{started, finished}
		c.Workers = 10
		c.Node = "node-1"
	})
	running, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, s.Handle("ok", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	require.NoError(t, s.Handle("bad", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return ax.Permanent(errors.New("no"))
	})))
	require.NoError(t, s.Handle("block", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		running <- struct{}{}
		<-release
		return nil
	})))
	start(t, s)
	scheduleN(t, s, "ok", 5)
	scheduleN(t, s, "bad", 2)
	scheduleN(t, s, "block", 1)
	_, err := s.Schedule(context.Background(), "later", nil, ax.In(time.Hour))
	require.NoError(t, err)
	recv(t, running)
	started.waitFor(t, 8)
	finished.waitFor(t, 7)

	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, "node-1", st.Node)
	require.Equal(t, 10, st.Workers)
	require.True(t, st.QueueCounted)
	require.Equal(t, map[string]map[ax.State]int64{
		"ok":    {ax.StateSucceeded: 5},
		"bad":   {ax.StateDead: 2},
		"block": {ax.StateRunning: 1},
		"later": {ax.StateScheduled: 1},
	}, st.Queue)
	require.Equal(t, map[string]int{"block": 1}, st.Running)
	require.Zero(t, st.DroppedEvents)
	close(release)
	finished.waitFor(t, 8)
	require.Empty(t, s.Running())
	require.NoError(t, s.Stop(context.Background()))
	_, err = s.Stats(context.Background())
	require.ErrorIs(t, err, ax.ErrSchedulerClosed)
}

// noCounter hides a store's optional interfaces.
type noCounter struct{ store.Store }

// TestSchedulerStatsWithoutCounter: a store that cannot count leaves Queue
// out.
func TestSchedulerStatsWithoutCounter(t *testing.T) {
	s := newScheduler(t, noCounter{newMemstore()})
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	require.False(t, st.QueueCounted)
	require.Nil(t, st.Queue)
	require.Empty(t, st.Running, "not started")
}

// TestObserverBlockedDoesNotSlowJobs: an observer that blocks until the
// end of the test does not hold jobs back; its events are dropped and
// counted.
func TestObserverBlockedDoesNotSlowJobs(t *testing.T) {
	const jobs = 500
	unblock := make(chan struct{})
	st := newMemstore()
	s := newScheduler(t, st, func(c *ax.Config) {
		c.Observers = []ax.Observer{ax.ObserverFunc(func(ax.Event) { <-unblock })}
		c.EventBuffer = 10
	})
	t.Cleanup(func() { close(unblock) }) // before the Stop registered by newScheduler
	require.NoError(t, s.Handle("noop", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	start(t, s)
	scheduleN(t, s, "noop", jobs)
	waitCount(t, st, "noop", ax.StateSucceeded, jobs)
	require.Greater(t, s.DroppedEvents(), int64(jobs), "each job emits 3 events; at most 11 were taken")
}

// waitCount polls a counting store until kind has want jobs in state,
// failing after a generous deadline.
func waitCount(t *testing.T, st store.Counter, kind string, state ax.State, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		counts, err := st.CountJobs(context.Background())
		require.NoError(t, err)
		var n int64
		for _, c := range counts {
			if c.Kind == kind && c.State == state {
				n = c.Count
			}
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s jobs in state %s, want %d", n, kind, state, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }
