package axstats_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axstats"
)

// manualClock is a clock that moves only when told to.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestStatsObserverPercentiles checks the nearest-rank percentiles and the
// sliding window.
func TestStatsObserverPercentiles(t *testing.T) {
	clock := newManualClock()
	so := axstats.New(axstats.Config{Window: time.Minute, Clock: clock.Now})
	for i := 1; i <= 100; i++ { // lags 1..100ms, run times 2..200ms
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: clock.Now(), StartLag: ms(i)})
		so.Observe(ax.Event{Kind: ax.EventSucceeded, JobKind: "mail", At: clock.Now(), Duration: ms(2 * i)})
	}
	got := so.Snapshot()["mail"]
	require.Equal(t, axstats.Percentiles{Count: 100, P50: ms(50), P90: ms(90), P99: ms(99), Max: ms(100)}, got.StartLag)
	require.Equal(t, axstats.Percentiles{Count: 100, P50: ms(100), P90: ms(180), P99: ms(198), Max: ms(200)}, got.RunTime)

	clock.Advance(30 * time.Second)
	for range 10 {
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: clock.Now(), StartLag: time.Second})
	}
	clock.Advance(45 * time.Second) // the first 100 samples leave the window
	got = so.Snapshot()["mail"]
	require.Equal(t, axstats.Percentiles{Count: 10, P50: time.Second, P90: time.Second, P99: time.Second, Max: time.Second}, got.StartLag)
	require.Equal(t, axstats.Percentiles{}, got.RunTime)
	require.Equal(t, int64(110), got.Started, "counters are not windowed")
	require.Equal(t, int64(100), got.Succeeded)
}

// TestStatsObserverSampleCap: a kind keeps only its last Samples samples.
func TestStatsObserverSampleCap(t *testing.T) {
	clock := newManualClock()
	so := axstats.New(axstats.Config{Samples: 4, Clock: clock.Now})
	for i := 1; i <= 6; i++ {
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: clock.Now(), StartLag: ms(i)})
	}
	require.Equal(t, axstats.Percentiles{Count: 4, P50: ms(4), P90: ms(6), P99: ms(6), Max: ms(6)}, so.Snapshot()["mail"].StartLag)
}

// TestStatsObserverCounters: every event kind lands in its counter.
func TestStatsObserverCounters(t *testing.T) {
	so := axstats.New(axstats.Config{})
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
