package axprom_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axprom"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newScheduler returns a Scheduler on st observed by c and then by the
// extra observers, with c attached; it is stopped when t ends.
func newScheduler(t *testing.T, st store.Store, c *axprom.Collector, extra ...ax.Observer) *ax.Scheduler {
	t.Helper()
	s, err := ax.New(ax.Config{
		Store:        st,
		PollInterval: 50 * time.Millisecond,
		Observers:    append([]ax.Observer{c}, extra...),
		Node:         "node-1",
	})
	require.NoError(t, err)
	c.Attach(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// eventCounter counts events of some kinds; waiting on it after the
// Collector in Config.Observers means the Collector saw them.
type eventCounter struct {
	kinds map[ax.EventKind]bool
	mu    sync.Mutex
	n     int
	ch    chan struct{} // signalled on every count
}

func newEventCounter(kinds ...ax.EventKind) *eventCounter {
	c := &eventCounter{kinds: map[ax.EventKind]bool{}, ch: make(chan struct{}, 1)}
	for _, k := range kinds {
		c.kinds[k] = true
	}
	return c
}

func (c *eventCounter) Observe(e ax.Event) {
	if !c.kinds[e.Kind] {
		return
	}
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *eventCounter) waitFor(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		got := c.n
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-c.ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %d events (have %d)", n, got)
		}
	}
}

// TestCollectorScriptedRun runs a known mix of jobs and checks every
// metric: counters exact, histogram sample counts, gauges.
func TestCollectorScriptedRun(t *testing.T) {
	c := axprom.New(axprom.Options{})
	finished := newEventCounter(ax.EventSucceeded, ax.EventDead, ax.EventCancelled)
	startedEv := newEventCounter(ax.EventStarted)
	s := newScheduler(t, memstore.New(), c, finished, startedEv)
	ctx := context.Background()

	noDelay := ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return 0 }))
	require.NoError(t, s.Handle("ok", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	require.NoError(t, s.Handle("flaky", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), noDelay))
	require.NoError(t, s.Handle("bad", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return ax.Permanent(errors.New("never works"))
	})))
	running := make(chan struct{})
	require.NoError(t, s.Handle("stuck", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
		close(running)
		<-ctx.Done()
		return ctx.Err()
	})))
	require.NoError(t, s.Start(ctx))

	schedule := func(kind string, n int, opts ...ax.ScheduleOption) {
		for range n {
			_, err := s.Schedule(ctx, kind, nil, opts...)
			require.NoError(t, err)
		}
	}
	schedule("ok", 5)
	schedule("flaky", 3)
	schedule("bad", 2)
	schedule("later", 1, ax.In(time.Hour))
	res, err := s.Schedule(ctx, "stuck", nil)
	require.NoError(t, err)
	<-running
	startedEv.waitFor(t, 5+6+2+1)
	finished.waitFor(t, 5+3+2)

	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ax_jobs_running Handlers running on this host.
# TYPE ax_jobs_running gauge
ax_jobs_running{kind="bad"} 0
ax_jobs_running{kind="flaky"} 0
ax_jobs_running{kind="later"} 0
ax_jobs_running{kind="ok"} 0
ax_jobs_running{kind="stuck"} 1
`), "ax_jobs_running"))

	_, err = s.Cancel(ctx, res.ID)
	require.NoError(t, err)
	finished.waitFor(t, 5+3+2+1)

	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ax_jobs_scheduled_total Jobs scheduled by this host.
# TYPE ax_jobs_scheduled_total counter
ax_jobs_scheduled_total{kind="bad"} 2
ax_jobs_scheduled_total{kind="flaky"} 3
ax_jobs_scheduled_total{kind="later"} 1
ax_jobs_scheduled_total{kind="ok"} 5
ax_jobs_scheduled_total{kind="stuck"} 1
# HELP ax_jobs_started_total Job attempts started on this host.
# TYPE ax_jobs_started_total counter
ax_jobs_started_total{kind="bad"} 2
ax_jobs_started_total{kind="flaky"} 6
ax_jobs_started_total{kind="later"} 0
ax_jobs_started_total{kind="ok"} 5
ax_jobs_started_total{kind="stuck"} 1
# HELP ax_jobs_succeeded_total Job attempts that succeeded on this host.
# TYPE ax_jobs_succeeded_total counter
ax_jobs_succeeded_total{kind="bad"} 0
ax_jobs_succeeded_total{kind="flaky"} 3
ax_jobs_succeeded_total{kind="later"} 0
ax_jobs_succeeded_total{kind="ok"} 5
ax_jobs_succeeded_total{kind="stuck"} 0
# HELP ax_jobs_failed_total Job attempts that failed on this host (each then retried or dead).
# TYPE ax_jobs_failed_total counter
ax_jobs_failed_total{kind="bad"} 2
ax_jobs_failed_total{kind="flaky"} 3
ax_jobs_failed_total{kind="later"} 0
ax_jobs_failed_total{kind="ok"} 0
ax_jobs_failed_total{kind="stuck"} 0
# HELP ax_jobs_retried_total Failed job attempts rescheduled after a backoff.
# TYPE ax_jobs_retried_total counter
ax_jobs_retried_total{kind="bad"} 0
ax_jobs_retried_total{kind="flaky"} 3
ax_jobs_retried_total{kind="later"} 0
ax_jobs_retried_total{kind="ok"} 0
ax_jobs_retried_total{kind="stuck"} 0
# HELP ax_jobs_dead_total Jobs that failed for good on this host (attempts used up or permanent error).
# TYPE ax_jobs_dead_total counter
ax_jobs_dead_total{kind="bad"} 2
ax_jobs_dead_total{kind="flaky"} 0
ax_jobs_dead_total{kind="later"} 0
ax_jobs_dead_total{kind="ok"} 0
ax_jobs_dead_total{kind="stuck"} 0
# HELP ax_jobs_cancelled_total Running jobs cancelled by a user on this host.
# TYPE ax_jobs_cancelled_total counter
ax_jobs_cancelled_total{kind="bad"} 0
ax_jobs_cancelled_total{kind="flaky"} 0
ax_jobs_cancelled_total{kind="later"} 0
ax_jobs_cancelled_total{kind="ok"} 0
ax_jobs_cancelled_total{kind="stuck"} 1
# HELP ax_lease_lost_total Job leases this host lost (handler cancelled, result discarded).
# TYPE ax_lease_lost_total counter
ax_lease_lost_total{kind="bad"} 0
ax_lease_lost_total{kind="flaky"} 0
ax_lease_lost_total{kind="later"} 0
ax_lease_lost_total{kind="ok"} 0
ax_lease_lost_total{kind="stuck"} 0
# HELP ax_jobs_running Handlers running on this host.
# TYPE ax_jobs_running gauge
ax_jobs_running{kind="bad"} 0
ax_jobs_running{kind="flaky"} 0
ax_jobs_running{kind="later"} 0
ax_jobs_running{kind="ok"} 0
ax_jobs_running{kind="stuck"} 0
# HELP ax_events_dropped_total Events dropped because observers fell behind; the event-based metrics missed them.
# TYPE ax_events_dropped_total counter
ax_events_dropped_total 0
`), "ax_jobs_scheduled_total", "ax_jobs_started_total", "ax_jobs_succeeded_total", "ax_jobs_failed_total",
		"ax_jobs_retried_total", "ax_jobs_dead_total", "ax_jobs_cancelled_total", "ax_lease_lost_total",
		"ax_jobs_running", "ax_events_dropped_total"))

	wantCounts := map[string]uint64{"ok": 5, "flaky": 6, "bad": 2, "stuck": 1, "later": 0}
	require.Equal(t, wantCounts, histogramCounts(t, c, "ax_job_start_lag_seconds"))
	require.Equal(t, wantCounts, histogramCounts(t, c, "ax_job_duration_seconds"))

	queue := `
# HELP ax_queue_depth Live jobs in the store by kind and state, for the whole cluster: every host exports the same figure, aggregate with max.
# TYPE ax_queue_depth gauge
`
	dueAge := `
# HELP ax_queue_oldest_due_age_seconds How long the oldest due job of the kind that no host has started has waited (0: none due), for the whole cluster: aggregate with max.
# TYPE ax_queue_oldest_due_age_seconds gauge
`
	// Finished jobs are not depth: only "later" is still in the queue.
	want := map[string]map[string]int{"later": {"scheduled": 1}}
	for _, kind := range []string{"bad", "flaky", "later", "ok", "stuck"} {
		for _, state := range []string{"paused", "retrying", "running", "scheduled"} {
			queue += `ax_queue_depth{kind="` + kind + `",scope="cluster",state="` + state + `"} ` + strconv.Itoa(want[kind][state]) + "\n"
		}
		dueAge += `ax_queue_oldest_due_age_seconds{kind="` + kind + `",scope="cluster"} 0` + "\n"
	}
	// A fresh Collector, so the count is not one cached before the cancel.
	fresh := axprom.New(axprom.Options{})
	fresh.Attach(s)
	require.NoError(t, testutil.CollectAndCompare(fresh, strings.NewReader(queue+dueAge), "ax_queue_depth", "ax_queue_oldest_due_age_seconds"))
}

// histogramCounts returns each kind's sample count of histogram name.
func histogramCounts(t *testing.T, c prometheus.Collector, name string) map[string]uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		require.Equal(t, dto.MetricType_HISTOGRAM, f.GetType())
		for _, m := range f.GetMetric() {
			out[labelValue(m, "kind")] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestCollectorEventsOnly checks the metrics that a scripted run does not
// reach (lease lost, snoozed, leader) from events given directly, and that
// without Attach only event metrics are exported.
func TestCollectorEventsOnly(t *testing.T) {
	c := axprom.New(axprom.Options{ConstLabels: prometheus.Labels{"node": "n1"}})
	c.Observe(ax.Event{Kind: ax.EventLeaseLost, JobKind: "mail"})
	c.Observe(ax.Event{Kind: ax.EventSnoozed, JobKind: "mail", Duration: 3 * time.Millisecond})
	c.Observe(ax.Event{Kind: ax.EventLeaderChanged, Leader: true})
	c.Observe(ax.Event{Kind: ax.EventRescued, JobKind: "mail", Owner: "dead-host", State: ax.StateRetrying})
	c.Observe(ax.Event{Kind: ax.EventRescued, JobKind: "mail", Owner: "dead-host", State: ax.StateDead})
	c.Observe(ax.Event{Kind: ax.EventHandedBack, JobKind: "pdf"})
	c.Observe(ax.Event{Kind: ax.EventKeyMissing, JobKind: "pdf", Err: ax.ErrKeyMissing})
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ax_jobs_key_missing_total Job attempts this host could not open (key not in its ring, or a newer envelope format), left for a host that can.
# TYPE ax_jobs_key_missing_total counter
ax_jobs_key_missing_total{kind="mail",node="n1"} 0
ax_jobs_key_missing_total{kind="pdf",node="n1"} 1
# HELP ax_jobs_rescued_total Jobs whose lease had expired (owner died or stalled) that this host took back.
# TYPE ax_jobs_rescued_total counter
ax_jobs_rescued_total{kind="mail",node="n1"} 2
ax_jobs_rescued_total{kind="pdf",node="n1"} 0
# HELP ax_jobs_handed_back_total Jobs this host handed back unfinished because Stop ran out of time.
# TYPE ax_jobs_handed_back_total counter
ax_jobs_handed_back_total{kind="mail",node="n1"} 0
ax_jobs_handed_back_total{kind="pdf",node="n1"} 1
`), "ax_jobs_key_missing_total", "ax_jobs_rescued_total", "ax_jobs_handed_back_total"))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ax_lease_lost_total Job leases this host lost (handler cancelled, result discarded).
# TYPE ax_lease_lost_total counter
ax_lease_lost_total{kind="mail",node="n1"} 1
ax_lease_lost_total{kind="pdf",node="n1"} 0
# HELP ax_jobs_snoozed_total Job attempts that snoozed on this host.
# TYPE ax_jobs_snoozed_total counter
ax_jobs_snoozed_total{kind="mail",node="n1"} 1
ax_jobs_snoozed_total{kind="pdf",node="n1"} 0
# HELP ax_leader 1 while this host holds the maintenance leadership, else 0.
# TYPE ax_leader gauge
ax_leader{node="n1"} 1
`), "ax_lease_lost_total", "ax_jobs_snoozed_total", "ax_leader", "ax_jobs_running", "ax_queue_depth",
		"ax_queue_oldest_due_age_seconds", "ax_events_dropped_total"))
	c.Observe(ax.Event{Kind: ax.EventLeaderChanged, Leader: false})
	require.Equal(t, 0, testutil.CollectAndCount(c, "ax_jobs_running", "ax_queue_depth", "ax_events_dropped_total"))
	require.Equal(t, map[string]uint64{"mail": 1, "pdf": 0}, histogramCounts(t, c, "ax_job_duration_seconds"))
}

// TestCollectorLint: names, help and units follow Prometheus conventions.
func TestCollectorLint(t *testing.T) {
	c := axprom.New(axprom.Options{})
	s := newScheduler(t, memstore.New(), c)
	c.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail"})
	_, err := s.Schedule(context.Background(), "mail", nil)
	require.NoError(t, err)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// countingStore counts CountJobs calls; block makes them wait for their
// context.
type countingStore struct {
	*memstore.Store
	calls atomic.Int64
	block atomic.Bool
}

func (s *countingStore) CountJobs(ctx context.Context) ([]store.StateCount, error) {
	s.calls.Add(1)
	if s.block.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.CountJobs(ctx)
}

// TestCollectorQueueDepthCacheAndTimeout: scrapes within QueueCacheTTL
// share one count; a count slower than QueueTimeout leaves ax_queue_depth
// out of the scrape and counts an error.
func TestCollectorQueueDepthCacheAndTimeout(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	st := &countingStore{Store: memstore.New()}
	c := axprom.New(axprom.Options{QueueCacheTTL: 10 * time.Second, QueueTimeout: 10 * time.Millisecond, Clock: clock})
	s := newScheduler(t, st, c)
	_, err := s.Schedule(context.Background(), "mail", nil)
	require.NoError(t, err)

	require.Equal(t, 4, testutil.CollectAndCount(c, "ax_queue_depth"), "one kind, every live state")
	advance(9 * time.Second)
	require.Equal(t, 4, testutil.CollectAndCount(c, "ax_queue_depth"))
	require.Equal(t, int64(1), st.calls.Load(), "cached")

	st.block.Store(true)
	advance(time.Second)
	require.Equal(t, 0, testutil.CollectAndCount(c, "ax_queue_depth", "ax_queue_oldest_due_age_seconds"), "timed out")
	require.Equal(t, int64(2), st.calls.Load())
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ax_queue_depth_errors_total Scrapes whose queue reading failed or timed out (the cluster-wide metrics left out).
# TYPE ax_queue_depth_errors_total counter
ax_queue_depth_errors_total 1
`), "ax_queue_depth_errors_total"))

	st.block.Store(false)
	advance(10 * time.Second)
	require.Equal(t, 4, testutil.CollectAndCount(c, "ax_queue_depth"), "recovered")
}

// TestCollectorOldestDueAge: a kind no host runs shows how long its
// oldest due job has waited, in the store's clock; a store that cannot
// tell leaves the metric out and keeps the queue depth.
func TestCollectorOldestDueAge(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	st := memstore.New(memstore.WithClock(clock))
	c := axprom.New(axprom.Options{QueueCacheTTL: time.Nanosecond})
	s := newScheduler(t, st, c)
	_, err := s.Schedule(context.Background(), "stalled", nil)
	require.NoError(t, err)
	mu.Lock()
	now = now.Add(90 * time.Second)
	mu.Unlock()
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ax_queue_oldest_due_age_seconds How long the oldest due job of the kind that no host has started has waited (0: none due), for the whole cluster: aggregate with max.
# TYPE ax_queue_oldest_due_age_seconds gauge
ax_queue_oldest_due_age_seconds{kind="stalled",scope="cluster"} 90
`), "ax_queue_oldest_due_age_seconds"))

	counterOnly := struct {
		store.Store
		store.Counter
	}{st, st}
	c2 := axprom.New(axprom.Options{})
	newScheduler(t, counterOnly, c2)
	require.Equal(t, 0, testutil.CollectAndCount(c2, "ax_queue_oldest_due_age_seconds"), "no DueInspector: left out")
	require.Equal(t, 4, testutil.CollectAndCount(c2, "ax_queue_depth"), "the depth is still there")
	require.Equal(t, 0.0, testutil.ToFloat64(collectorMetric(t, c2, "ax_queue_depth_errors_total")), "not an error")
}

// TestCollectorUnhandledKind: ax_kind_unhandled is 1 for a kind whose
// jobs have been due for the grace (5 minutes by default) with no running
// node handling it, 0 for the others, in the store's clock.
func TestCollectorUnhandledKind(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	ctx := context.Background()
	st := memstore.New(memstore.WithClock(clock))
	worker := &store.NodeParams{Name: "worker", Kinds: []string{"email"}, TTL: time.Hour}
	require.NoError(t, st.HeartbeatNode(ctx, worker))
	c := axprom.New(axprom.Options{QueueCacheTTL: time.Nanosecond})
	s := newScheduler(t, st, c)
	for _, kind := range []string{"email", "emial"} {
		_, err := s.Schedule(ctx, kind, nil)
		require.NoError(t, err)
	}
	const help = `# HELP ax_kind_unhandled 1 while the kind's jobs have been due for the UnhandledKindGrace with no running node handling it, for the whole cluster: aggregate with max.
# TYPE ax_kind_unhandled gauge
`
	for _, step := range []struct {
		after     time.Duration
		unhandled string // ax_kind_unhandled of emial
	}{{time.Minute, "0"}, {5 * time.Minute, "1"}} {
		mu.Lock()
		now = now.Add(step.after)
		mu.Unlock()
		require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(help+
			`ax_kind_unhandled{kind="email",scope="cluster"} 0
ax_kind_unhandled{kind="emial",scope="cluster"} `+step.unhandled+"\n"), "ax_kind_unhandled"), "after %s", step.after)
	}
}

// collectorMetric returns the single series of name from c, as a
// Collector testutil.ToFloat64 reads.
func collectorMetric(t *testing.T, c prometheus.Collector, name string) prometheus.Collector {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			if f.GetMetric()[0].GetCounter() != nil {
				g.Set(f.GetMetric()[0].GetCounter().GetValue())
			} else {
				g.Set(f.GetMetric()[0].GetGauge().GetValue())
			}
			return g
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestCollectorClusterScope runs two hosts on one store: each exports the
// same cluster-wide depth, labelled scope="cluster" (so max, not sum, is
// the cluster's figure), and its own per-host counters.
func TestCollectorClusterScope(t *testing.T) {
	st := memstore.New()
	reg := prometheus.NewPedanticRegistry()
	var hosts []*ax.Scheduler
	scheduledEv := newEventCounter(ax.EventScheduled)
	for _, node := range []string{"h1", "h2"} {
		c := axprom.New(axprom.Options{ConstLabels: prometheus.Labels{"node": node}})
		s := newScheduler(t, st, c, scheduledEv)
		require.NoError(t, s.Start(context.Background()))
		hosts = append(hosts, s)
		require.NoError(t, reg.Register(c))
	}
	for range 3 {
		_, err := hosts[0].Schedule(context.Background(), "mail", nil, ax.In(time.Hour))
		require.NoError(t, err)
	}
	scheduledEv.waitFor(t, 3)
	families, err := reg.Gather()
	require.NoError(t, err)
	perNode := map[string]float64{}
	scheduled := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case f.GetName() == "ax_queue_depth" && labelValue(m, "state") == "scheduled":
				require.Equal(t, "cluster", labelValue(m, "scope"))
				perNode[labelValue(m, "node")] = m.GetGauge().GetValue()
			case f.GetName() == "ax_jobs_scheduled_total":
				require.Empty(t, labelValue(m, "scope"), "per-host metrics carry no scope")
				scheduled[labelValue(m, "node")] = m.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, map[string]float64{"h1": 3, "h2": 3}, perNode, "every host exports the cluster's depth")
	require.Equal(t, map[string]float64{"h1": 3}, scheduled, "each host counts what it did")
}

// TestCollectorFlows: a kind's breaker state and flow limits are exported
// cluster-wide from the store; breaker transitions and refused Schedule
// calls are counted by the host that made them.
func TestCollectorFlows(t *testing.T) {
	st := memstore.New()
	c := axprom.New(axprom.Options{ConstLabels: prometheus.Labels{"node": "n1"}})
	seen := newEventCounter(ax.EventBreakerOpened, ax.EventBackpressure)
	s := newScheduler(t, st, c, seen)
	require.NoError(t, s.Handle("mail", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
		ax.GlobalConcurrency(5), ax.RateLimit(120, time.Minute), ax.MaxPending(1),
		ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 2}),
		ax.CircuitBreaker(ax.BreakerConfig{CoolDown: time.Hour})))
	require.NoError(t, s.Start(context.Background()))
	_, err := s.Admin().OpenBreaker(context.Background(), "mail")
	require.NoError(t, err)
	_, err = s.Schedule(context.Background(), "mail", nil)
	require.NoError(t, err)
	_, err = s.Schedule(context.Background(), "mail", nil)
	require.ErrorIs(t, err, ax.ErrBackpressure)
	seen.waitFor(t, 2)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ax_breaker_state 1 for the state the kind's circuit breaker is in, for the whole cluster: aggregate with max.
# TYPE ax_breaker_state gauge
ax_breaker_state{kind="mail",node="n1",scope="cluster",state="closed"} 0
ax_breaker_state{kind="mail",node="n1",scope="cluster",state="half_open"} 0
ax_breaker_state{kind="mail",node="n1",scope="cluster",state="open"} 1
# HELP ax_flow_limit The kind's flow settings as stored (rates in starts per second), for the whole cluster: aggregate with max.
# TYPE ax_flow_limit gauge
ax_flow_limit{kind="mail",limit="concurrency",node="n1",scope="cluster"} 5
ax_flow_limit{kind="mail",limit="max_pending",node="n1",scope="cluster"} 1
ax_flow_limit{kind="mail",limit="partition_concurrency",node="n1",scope="cluster"} 2
ax_flow_limit{kind="mail",limit="rate_per_second",node="n1",scope="cluster"} 2
# HELP ax_breaker_transitions_total Circuit breaker transitions made by this host's store calls, by the state entered.
# TYPE ax_breaker_transitions_total counter
ax_breaker_transitions_total{kind="mail",node="n1",to="open"} 1
# HELP ax_backpressure_total Schedule calls on this host that met a full queue (kind empty: the bound on all kinds).
# TYPE ax_backpressure_total counter
ax_backpressure_total{kind="mail",node="n1"} 1
`), "ax_breaker_state", "ax_flow_limit", "ax_breaker_transitions_total", "ax_backpressure_total"))
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
}
