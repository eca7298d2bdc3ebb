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

// TestStatsObserverPercentiles checks the nearest-rank percentiles and the
// sliding window.
func TestStatsObserverPercentiles(t *testing.T) {
	clock := newAlertClock()
	so := ax.NewStatsObserver(ax.StatsConfig{Window: time.Minute, Clock: clock.Now})
	for i := 1; i <= 100; i++ { // lags 1..100ms, run times 2..200ms
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: clock.Now(), StartLag: ms(i)})
		so.Observe(ax.Event{Kind: ax.EventSucceeded, JobKind: "mail", At: clock.Now(), Duration: ms(2 * i)})
	}
	got := so.Snapshot()["mail"]
	require.Equal(t, ax.Percentiles{Count: 100, P50: ms(50), P90: ms(90), P99: ms(99), Max: ms(100)}, got.StartLag)
	require.Equal(t, ax.Percentiles{Count: 100, P50: ms(100), P90: ms(180), P99: ms(198), Max: ms(200)}, got.RunTime)

	clock.Advance(30 * time.Second)
	for range 10 {
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: clock.Now(), StartLag: time.Second})
	}
	clock.Advance(45 * time.Second) // the first 100 samples leave the window
	got = so.Snapshot()["mail"]
	require.Equal(t, ax.Percentiles{Count: 10, P50: time.Second, P90: time.Second, P99: time.Second, Max: time.Second}, got.StartLag)
	require.Equal(t, ax.Percentiles{}, got.RunTime)
	require.Equal(t, int64(110), got.Started, "counters are not windowed")
	require.Equal(t, int64(100), got.Succeeded)
}

// TestStatsObserverSampleCap: a kind keeps only its last Samples samples.
func TestStatsObserverSampleCap(t *testing.T) {
	clock := newAlertClock()
	so := ax.NewStatsObserver(ax.StatsConfig{Samples: 4, Clock: clock.Now})
	for i := 1; i <= 6; i++ {
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: clock.Now(), StartLag: ms(i)})
	}
	require.Equal(t, ax.Percentiles{Count: 4, P50: ms(4), P90: ms(6), P99: ms(6), Max: ms(6)}, so.Snapshot()["mail"].StartLag)
}

// TestStatsObserverCounters: every event kind lands in its counter.
func TestStatsObserverCounters(t *testing.T) {
	so := ax.NewStatsObserver(ax.StatsConfig{})
	kinds := []ax.EventKind{
		ax.EventScheduled, ax.EventStarted, ax.EventSucceeded, ax.EventFailed, ax.EventRetried,
		ax.EventDead, ax.EventCancelled, ax.EventSnoozed, ax.EventLeaseLost,
	}
	for i, k := range kinds {
		for range i + 1 {
			so.Observe(ax.Event{Kind: k, JobKind: "mail", At: time.Now()})
		}
	}
	so.Observe(ax.Event{Kind: ax.EventLeaderChanged, Leader: true})
	got := so.Snapshot()
	require.Len(t, got, 1)
	ks := got["mail"]
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}, []int64{
		ks.Scheduled, ks.Started, ks.Succeeded, ks.Failed, ks.Retried, ks.Dead, ks.Cancelled, ks.Snoozed, ks.LeaseLost,
	})
	require.Equal(t, 2, ks.StartLag.Count)
	require.Equal(t, 3+4+7+8, ks.RunTime.Count, "succeeded, failed, cancelled and snoozed attempts have run times")
}

// TestSchedulerStats checks a Scheduler's Stats after a scripted run.
func TestSchedulerStats(t *testing.T) {
	so := ax.NewStatsObserver(ax.StatsConfig{})
	started := newEventCounter(ax.EventStarted)
	finished := newEventCounter(ax.EventSucceeded, ax.EventDead)
	s := newScheduler(t, newMemstore(), func(c *ax.Config) {
		c.Observers = []ax.Observer{so, started, finished}
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
	counters := func(ks ax.KindStats) [9]int64 {
		return [9]int64{ks.Scheduled, ks.Started, ks.Succeeded, ks.Failed, ks.Retried, ks.Dead, ks.Cancelled, ks.Snoozed, ks.LeaseLost}
	}
	require.Equal(t, [9]int64{5, 5, 5}, counters(st.Kinds["ok"]))
	require.Equal(t, [9]int64{2, 2, 0, 2, 0, 2}, counters(st.Kinds["bad"]))
	require.Equal(t, [9]int64{1, 1}, counters(st.Kinds["block"]))
	require.Equal(t, [9]int64{1}, counters(st.Kinds["later"]))
	require.Equal(t, 5, st.Kinds["ok"].StartLag.Count)
	require.Equal(t, 5, st.Kinds["ok"].RunTime.Count)
	require.Equal(t, 1, st.Kinds["block"].StartLag.Count)
	require.Zero(t, st.Kinds["block"].RunTime.Count)

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
// out, and without a StatsObserver Kinds is nil.
func TestSchedulerStatsWithoutCounter(t *testing.T) {
	s := newScheduler(t, noCounter{newMemstore()})
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	require.False(t, st.QueueCounted)
	require.Nil(t, st.Queue)
	require.Nil(t, st.Kinds)
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
