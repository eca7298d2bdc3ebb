package axalert_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axalert"
	"github.com/axsched/ax/store/memstore"
)

// alertClock is a manual clock for Alerters.
type alertClock struct {
	mu sync.Mutex
	t  time.Time
}

func newAlertClock() *alertClock {
	return &alertClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *alertClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *alertClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// alertLog records an Alerter's alerts.
type alertLog struct {
	mu     sync.Mutex
	alerts []axalert.Alert
}

func (l *alertLog) add(a axalert.Alert) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.alerts = append(l.alerts, a)
}

// got returns the alerts so far as "rule kind fired|resolved" strings.
func (l *alertLog) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.alerts))
	for i, a := range l.alerts {
		state := "fired"
		if a.Resolved {
			state = "resolved"
		}
		out[i] = a.Rule.String() + " " + a.Kind + " " + state
	}
	return out
}

func failed(kind string) ax.Event {
	return ax.Event{Kind: ax.EventFailed, JobKind: kind, Err: errors.New("downstream unreachable")}
}

func succeeded(kind string) ax.Event { return ax.Event{Kind: ax.EventSucceeded, JobKind: kind} }

func started(kind string, lag time.Duration) ax.Event {
	return ax.Event{Kind: ax.EventStarted, JobKind: kind, StartLag: lag}
}

// TestAlerterBurstFiresOnceEachRule: 1000 failures in a row fire each
// failure rule exactly once, and successes resolve each exactly once.
func TestAlerterBurstFiresOnceEachRule(t *testing.T) {
	tests := []struct {
		name string
		cfg  axalert.Config
		want []string
	}{
		{
			name: "consecutive failures only",
			cfg:  axalert.Config{SuccessRate: -1, StartLagP99: -1},
			want: []string{"consecutive_failures mail fired", "consecutive_failures mail resolved"},
		},
		{
			name: "success rate only",
			cfg:  axalert.Config{ConsecutiveFailures: -1, StartLagP99: -1},
			want: []string{"success_rate mail fired", "success_rate mail resolved"},
		},
		{
			name: "defaults",
			cfg:  axalert.Config{},
			want: []string{
				"consecutive_failures mail fired", "success_rate mail fired",
				"consecutive_failures mail resolved", "success_rate mail resolved",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newAlertClock()
			var log alertLog
			cfg := tt.cfg
			cfg.Clock = clock.Now
			al := axalert.New(cfg, log.add)
			for range 1000 {
				al.Observe(failed("mail"))
				clock.Advance(time.Millisecond)
			}
			al.Observe(ax.Event{Kind: ax.EventDead, JobKind: "other"}) // other kinds and events change nothing
			clock.Advance(axalert.DefaultWindow)                       // the failures leave the window
			for range 1000 {
				al.Observe(succeeded("mail"))
				clock.Advance(time.Millisecond)
			}
			require.Equal(t, tt.want, log.got())
		})
	}
}

// TestAlerterAlertFields checks what a firing and a resolution carry.
func TestAlerterAlertFields(t *testing.T) {
	clock := newAlertClock()
	var log alertLog
	al := axalert.New(axalert.Config{SuccessRate: -1, StartLagP99: -1, Clock: clock.Now}, log.add)
	for range 5 {
		al.Observe(failed("mail"))
	}
	al.Observe(succeeded("mail"))
	require.Len(t, log.alerts, 2)
	fired, resolved := log.alerts[0], log.alerts[1]
	require.Equal(t, axalert.RuleConsecutiveFailures, fired.Rule)
	require.False(t, fired.Resolved)
	require.Equal(t, 3.0, fired.Value)
	require.Equal(t, clock.Now(), fired.At)
	require.EqualError(t, fired.Err, "downstream unreachable")
	require.Contains(t, fired.Message, `kind "mail" failed 3 times in a row`)
	require.True(t, resolved.Resolved)
	require.Equal(t, 5.0, resolved.Value)
	require.Contains(t, resolved.Message, "resolved: ")
}

// TestAlerterMinInterval: a rule breached again soon after it resolved
// fires only once MinInterval has passed since its last firing.
func TestAlerterMinInterval(t *testing.T) {
	clock := newAlertClock()
	var log alertLog
	al := axalert.New(axalert.Config{SuccessRate: -1, StartLagP99: -1, MinInterval: 10 * time.Minute, Clock: clock.Now}, log.add)
	burst := func(n int) {
		for range n {
			al.Observe(failed("mail"))
		}
	}
	burst(3)
	al.Observe(succeeded("mail"))
	clock.Advance(time.Minute)
	burst(50) // breached again, 1 minute after firing: held back
	require.Equal(t, []string{"consecutive_failures mail fired", "consecutive_failures mail resolved"}, log.got())
	clock.Advance(9 * time.Minute)
	burst(1) // still breached, 10 minutes after firing: fires
	burst(100)
	require.Equal(t, []string{
		"consecutive_failures mail fired", "consecutive_failures mail resolved", "consecutive_failures mail fired",
	}, log.got())
}

// TestAlerterKindsApart: rules are kept per kind.
func TestAlerterKindsApart(t *testing.T) {
	var log alertLog
	al := axalert.New(axalert.Config{SuccessRate: -1, StartLagP99: -1, Clock: newAlertClock().Now}, log.add)
	for range 2 {
		al.Observe(failed("a"))
		al.Observe(failed("b"))
	}
	al.Observe(succeeded("a"))
	al.Observe(failed("b"))
	al.Observe(failed("a"))
	require.Equal(t, []string{"consecutive_failures b fired"}, log.got())
}

// TestAlerterStartLag: the p99 rule fires when more than 1% of the starts
// in the window were later than the bound (with fewer than 100 starts, one
// is enough: p99 is then the maximum), and resolves when no more are.
func TestAlerterStartLag(t *testing.T) {
	clock := newAlertClock()
	var log alertLog
	al := axalert.New(axalert.Config{ConsecutiveFailures: -1, SuccessRate: -1, Clock: clock.Now}, log.add)
	for range 100 {
		al.Observe(started("mail", time.Second))
	}
	al.Observe(started("mail", time.Minute))
	al.Observe(started("mail", axalert.DefaultStartLagP99)) // at the bound is not above it
	require.Empty(t, log.got(), "1 late start of 102: p99 is within the bound")
	al.Observe(started("mail", time.Minute))
	require.Equal(t, []string{"start_lag_p99 mail fired"}, log.got(), "2 of 103")
	require.InDelta(t, 2.0/103, log.alerts[0].Value, 1e-9)
	require.Equal(t, 103, log.alerts[0].Samples)
	for range 96 {
		al.Observe(started("mail", time.Second))
	}
	require.Len(t, log.got(), 1, "2 of 199")
	al.Observe(started("mail", time.Second))
	require.Equal(t, []string{"start_lag_p99 mail fired", "start_lag_p99 mail resolved"}, log.got(), "2 of 200")
}

// TestAlerterMinSamples: a rate over fewer than MinSamples attempts
// decides nothing.
func TestAlerterMinSamples(t *testing.T) {
	var log alertLog
	al := axalert.New(axalert.Config{ConsecutiveFailures: -1, MinSamples: 10, Clock: newAlertClock().Now}, log.add)
	for range 9 {
		al.Observe(failed("mail"))
	}
	require.Empty(t, log.got())
	al.Observe(failed("mail"))
	require.Equal(t, []string{"success_rate mail fired"}, log.got())
}

// TestAlerterSchedulerBurst runs 1000 failing jobs through a Scheduler:
// one alert per rule; then successes resolve each once.
func TestAlerterSchedulerBurst(t *testing.T) {
	const jobs = 1000
	clock := newAlertClock()
	var log alertLog
	al := axalert.New(axalert.Config{Clock: clock.Now}, log.add)
	done := &deadOrDone{ch: make(chan struct{}, 10*jobs)}
	s, err := ax.New(ax.Config{Store: memstore.New(), Observers: []ax.Observer{al, done}, EventBuffer: 10 * jobs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	var broken sync.Mutex
	down := true
	require.NoError(t, s.Handle("mail", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		broken.Lock()
		defer broken.Unlock()
		if down {
			return ax.Permanent(errors.New("smtp: connection refused"))
		}
		return nil
	})))
	require.NoError(t, s.Start(context.Background()))
	scheduleN(t, s, "mail", jobs)
	done.waitFor(t, jobs)
	require.Equal(t, []string{"consecutive_failures mail fired", "success_rate mail fired"}, log.got())

	broken.Lock()
	down = false
	broken.Unlock()
	clock.Advance(axalert.DefaultWindow)
	scheduleN(t, s, "mail", axalert.DefaultMinSamples)
	done.waitFor(t, jobs+axalert.DefaultMinSamples)
	require.Equal(t, []string{
		"consecutive_failures mail fired", "success_rate mail fired",
		"consecutive_failures mail resolved", "success_rate mail resolved",
	}, log.got())
	require.Zero(t, s.DroppedEvents())
}

// scheduleN schedules n jobs of kind in one call.
func scheduleN(t *testing.T, s *ax.Scheduler, kind string, n int) {
	t.Helper()
	reqs := make([]ax.Request, n)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: kind}
	}
	_, err := s.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
}

// deadOrDone counts dead and succeeded events; a test waits on it, so
// observers listed before it have seen those events.
type deadOrDone struct {
	mu sync.Mutex
	n  int
	ch chan struct{}
}

func (c *deadOrDone) Observe(e ax.Event) {
	if e.Kind == ax.EventDead || e.Kind == ax.EventSucceeded {
		c.ch <- struct{}{}
	}
}

func (c *deadOrDone) waitFor(t *testing.T, n int) {
	t.Helper()
	for c.n < n {
		select {
		case <-c.ch:
			c.n++
		case <-time.After(30 * time.Second):
			t.Fatalf("timed out waiting for %d events", n)
		}
	}
}

// TestAlerterEventTime: without a Clock, rules run on the events' own
// times, so failures leave the window as later events arrive.
func TestAlerterEventTime(t *testing.T) {
	var log alertLog
	al := axalert.New(axalert.Config{ConsecutiveFailures: -1, StartLagP99: -1}, log.add)
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 20 {
		e := failed("mail")
		e.At = at
		al.Observe(e)
	}
	require.Equal(t, []string{"success_rate mail fired"}, log.got())
	require.Equal(t, at, log.alerts[0].At)
	at = at.Add(axalert.DefaultWindow + time.Minute)
	for range 20 {
		e := succeeded("mail")
		e.At = at
		al.Observe(e)
	}
	require.Equal(t, []string{"success_rate mail fired", "success_rate mail resolved"}, log.got())
	require.Equal(t, 1.0, log.alerts[1].Value)
	require.Equal(t, 20, log.alerts[1].Samples)
}
