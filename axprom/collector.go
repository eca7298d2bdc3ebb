// Package axprom exports an AX Scheduler's metrics to Prometheus.
//
// A Collector is both an ax.Observer, counting job events as they happen,
// and a prometheus.Collector. Add it to Config.Observers, attach the
// Scheduler (for running handlers, queue depth and dropped events, read at
// scrape time) and register it:
//
//	m := axprom.New(axprom.Options{ConstLabels: prometheus.Labels{"service": "billing"}})
//	s, err := ax.New(ax.Config{Store: st, Observers: []ax.Observer{m}})
//	...
//	m.Attach(s)
//	prometheus.MustRegister(m)
//
// # Per host and cluster-wide
//
// Most metrics describe this host: what it scheduled, ran, rescued and
// handed back. Sum them across hosts for the cluster's totals.
//
// A few describe the whole cluster: they are read from the store, so every
// host exports the same figure, and they carry the label scope="cluster"
// to say so. Aggregate them with max, never sum (sum counts the queue once
// per host):
//
//	max by (kind, state) (ax_queue_depth{scope="cluster"})
//	max by (kind) (ax_queue_oldest_due_age_seconds{scope="cluster"})
//
// Every host exports them, rather than only the maintenance leader, so
// that the series never go missing while the leadership changes hands;
// the store answers each host's count at most once per QueueCacheTTL.
//
// # Metrics
//
// Per host, with a kind label:
//
//	ax_jobs_scheduled_total      jobs scheduled by this host
//	ax_jobs_started_total        attempts started on this host
//	ax_jobs_succeeded_total      attempts that succeeded
//	ax_jobs_failed_total         attempts that failed (then retried or dead)
//	ax_jobs_retried_total        failed attempts rescheduled after a backoff
//	ax_jobs_dead_total           jobs that failed for good
//	ax_jobs_cancelled_total      running jobs cancelled by a user
//	ax_jobs_snoozed_total        attempts that snoozed
//	ax_jobs_key_missing_total    attempts this host could not open (a key not in
//	                             its ring: ax.EventKeyMissing), left for a host
//	                             that can; also counted as snoozed
//	ax_lease_lost_total          leases this host lost (handler cancelled)
//	ax_jobs_rescued_total        jobs whose lease expired (owner died or stalled) that this host took back
//	ax_jobs_handed_back_total    jobs this host handed back unfinished when Stop ran out of time
//	ax_job_start_lag_seconds     histogram: attempt start minus run_at
//	ax_job_duration_seconds      histogram: handler run time
//	ax_jobs_running              gauge: handlers running on this host
//	ax_breaker_transitions_total counter, also by to (open, half_open, closed):
//	                             circuit breaker transitions this host's store
//	                             calls made (each transition is counted by one
//	                             host: sum them)
//	ax_backpressure_total        Schedule calls on this host refused or held
//	                             for too many pending jobs (kind="" for
//	                             Config.MaxPending, all kinds)
//
// Per host, without a kind label:
//
//	ax_events_dropped_total      events the observers missed (the counters above too)
//	ax_queue_depth_errors_total  scrapes whose store reading failed or timed out
//	ax_leader                    gauge: 1 while this host leads maintenance
//
// Cluster-wide, scope="cluster", with a kind label (needs Attach):
//
//	ax_queue_depth                   gauge, also by state: live jobs (scheduled,
//	                                 retrying, running, paused) in the store
//	ax_queue_oldest_due_age_seconds  gauge: how long the oldest due job that no
//	                                 host has started has waited (0 when none is
//	                                 due). It grows while a kind is stalled (no
//	                                 host handles it, every host is full, or it
//	                                 is paused), before any job starts late.
//	                                 Absent when the store cannot tell
//	                                 (store.DueInspector; memstore can).
//	ax_kind_unhandled                gauge: 1 while the kind's jobs have been
//	                                 due for Config.UnhandledKindGrace with no
//	                                 running node handling it (a misspelt
//	                                 kind, or hosts deployed without its
//	                                 handler), else 0. Alert on it. Absent
//	                                 when the store cannot tell
//	                                 (store.NodeRegistry and
//	                                 store.DueInspector).
//	ax_breaker_state                 gauge, also by state (closed, open,
//	                                 half_open): 1 for the kind's breaker's
//	                                 state, 0 for the others; kinds with a
//	                                 CircuitBreaker only
//	ax_flow_limit                    gauge, also by limit (concurrency,
//	                                 partition_concurrency, rate_per_second,
//	                                 partition_rate_per_second, max_pending):
//	                                 the kind's flow settings as stored
//	                                 (the last host to start declared them)
//
// Finished jobs (succeeded, dead, cancelled) are not queue depth: count
// them with the per-host counters, whose rates say what the cluster does.
//
// The counters and histograms come from events, so they count only what
// this host did, and miss events dropped when observers fall behind
// (ax_events_dropped_total says how many). Only this package imports
// client_golang; the core does not depend on it.
package axprom

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Collector. The zero value means the documented
// defaults.
type Options struct {
	// ConstLabels are added to every metric, e.g. {"node": s.Node()} when
	// several Schedulers share a registry. A "scope" label is ignored on
	// the cluster-wide metrics, which carry scope="cluster".
	ConstLabels prometheus.Labels

	// StartLagBuckets are the upper bounds, in seconds, of the start lag
	// histogram's buckets. Defaults to DefaultStartLagBuckets.
	StartLagBuckets []float64

	// DurationBuckets are the upper bounds, in seconds, of the run time
	// histogram's buckets. Defaults to DefaultDurationBuckets.
	DurationBuckets []float64

	// QueueTimeout bounds the store calls reading the queue during a
	// scrape; on timeout the cluster-wide metrics are left out of that
	// scrape. Defaults to 2s.
	QueueTimeout time.Duration

	// QueueCacheTTL is how long a queue reading is reused by later
	// scrapes, so several scrapers cost one reading. Defaults to 5s.
	QueueCacheTTL time.Duration

	// Clock is the time, for tests of the cache. Defaults to time.Now.
	Clock func() time.Time
}

// Default histogram buckets, in seconds: millisecond resolution for lag
// and short jobs, up to minutes.
var (
	DefaultStartLagBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	DefaultDurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// Defaults of Options.
const (
	DefaultQueueTimeout  = 2 * time.Second
	DefaultQueueCacheTTL = 5 * time.Second
)

// states are the job states exported by ax_queue_depth, each kind having
// a series for every state (zero when it has no jobs in it): the live
// ones. Finished jobs wait only for the pruner; counting them as depth
// made the gauge grow with the retention, not with the backlog.
var states = []ax.State{ax.StateScheduled, ax.StateRetrying, ax.StateRunning, ax.StatePaused}

// Collector is an ax.Observer and a prometheus.Collector; see the package
// documentation. All methods are safe for concurrent use.
type Collector struct {
	opts Options

	scheduled, started, succeeded, failed, retried, dead, cancelled, snoozed, keyMissing, leaseLost, rescued, handedBack *prometheus.CounterVec
	startLag, duration                                                                                                   *prometheus.HistogramVec
	breakerTransitions, backpressure                                                                                     *prometheus.CounterVec

	runningDesc, queueDesc, dueAgeDesc, droppedDesc, queueErrDesc, leaderDesc, unhandledDesc *prometheus.Desc
	breakerStateDesc, flowLimitDesc                                                          *prometheus.Desc

	sched     atomic.Pointer[ax.Scheduler]
	leader    atomic.Bool
	queueErrs atomic.Int64

	kindsMu sync.RWMutex
	kinds   map[string]*kindMetrics

	queueMu    sync.Mutex // held while counting, so concurrent scrapes share one count
	queue      *ax.Stats
	queueKinds map[string]bool // every kind ever counted, so its series stay
	queueAt    time.Time
}

// kindMetrics caches one kind's metric children, so an event costs no
// label hashing.
type kindMetrics struct {
	scheduled, started, succeeded, failed, retried, dead, cancelled, snoozed, keyMissing, leaseLost, rescued, handedBack prometheus.Counter
	startLag, duration                                                                                                   prometheus.Observer
}

// New returns a Collector configured by opts.
func New(opts Options) *Collector {
	if opts.StartLagBuckets == nil {
		opts.StartLagBuckets = DefaultStartLagBuckets
	}
	if opts.DurationBuckets == nil {
		opts.DurationBuckets = DefaultDurationBuckets
	}
	if opts.QueueTimeout <= 0 {
		opts.QueueTimeout = DefaultQueueTimeout
	}
	if opts.QueueCacheTTL <= 0 {
		opts.QueueCacheTTL = DefaultQueueCacheTTL
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	cl := opts.ConstLabels
	cluster := prometheus.Labels{"scope": "cluster"}
	for k, v := range cl {
		if k != "scope" {
			cluster[k] = v
		}
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, []string{"kind"})
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: cl, Buckets: buckets}, []string{"kind"})
	}
	return &Collector{
		opts:      opts,
		scheduled: counter("ax_jobs_scheduled_total", "Jobs scheduled by this host."),
		started:   counter("ax_jobs_started_total", "Job attempts started on this host."),
		succeeded: counter("ax_jobs_succeeded_total", "Job attempts that succeeded on this host."),
		failed:    counter("ax_jobs_failed_total", "Job attempts that failed on this host (each then retried or dead)."),
		retried:   counter("ax_jobs_retried_total", "Failed job attempts rescheduled after a backoff."),
		dead:      counter("ax_jobs_dead_total", "Jobs that failed for good on this host (attempts used up or permanent error)."),
		cancelled: counter("ax_jobs_cancelled_total", "Running jobs cancelled by a user on this host."),
		snoozed:   counter("ax_jobs_snoozed_total", "Job attempts that snoozed on this host."),
		keyMissing: counter("ax_jobs_key_missing_total",
			"Job attempts this host could not open (key not in its ring, or a newer envelope format), left for a host that can."),
		leaseLost: counter("ax_lease_lost_total", "Job leases this host lost (handler cancelled, result discarded)."),
		rescued: counter("ax_jobs_rescued_total",
			"Jobs whose lease had expired (owner died or stalled) that this host took back."),
		handedBack: counter("ax_jobs_handed_back_total",
			"Jobs this host handed back unfinished because Stop ran out of time."),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_breaker_transitions_total",
			Help: "Circuit breaker transitions made by this host's store calls, by the state entered.", ConstLabels: cl},
			[]string{"kind", "to"}),
		backpressure: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_backpressure_total",
			Help: "Schedule calls on this host that met a full queue (kind empty: the bound on all kinds).", ConstLabels: cl},
			[]string{"kind"}),
		breakerStateDesc: prometheus.NewDesc("ax_breaker_state",
			"1 for the state the kind's circuit breaker is in, for the whole cluster: aggregate with max.",
			[]string{"kind", "state"}, cluster),
		flowLimitDesc: prometheus.NewDesc("ax_flow_limit",
			"The kind's flow settings as stored (rates in starts per second), for the whole cluster: aggregate with max.",
			[]string{"kind", "limit"}, cluster),
		startLag: histogram("ax_job_start_lag_seconds",
			"Attempt start minus the job's run_at, in the store's clock.", opts.StartLagBuckets),
		duration: histogram("ax_job_duration_seconds", "Handler run time of finished attempts.", opts.DurationBuckets),
		runningDesc: prometheus.NewDesc("ax_jobs_running",
			"Handlers running on this host.", []string{"kind"}, cl),
		queueDesc: prometheus.NewDesc("ax_queue_depth",
			"Live jobs in the store by kind and state, for the whole cluster: every host exports the same figure, aggregate with max.",
			[]string{"kind", "state"}, cluster),
		dueAgeDesc: prometheus.NewDesc("ax_queue_oldest_due_age_seconds",
			"How long the oldest due job of the kind that no host has started has waited (0: none due), for the whole cluster: aggregate with max.",
			[]string{"kind"}, cluster),
		unhandledDesc: prometheus.NewDesc("ax_kind_unhandled",
			"1 while the kind's jobs have been due for the UnhandledKindGrace with no running node handling it, for the whole cluster: aggregate with max.",
			[]string{"kind"}, cluster),
		droppedDesc: prometheus.NewDesc("ax_events_dropped_total",
			"Events dropped because observers fell behind; the event-based metrics missed them.", nil, cl),
		queueErrDesc: prometheus.NewDesc("ax_queue_depth_errors_total",
			"Scrapes whose queue reading failed or timed out (the cluster-wide metrics left out).", nil, cl),
		leaderDesc: prometheus.NewDesc("ax_leader",
			"1 while this host holds the maintenance leadership, else 0.", nil, cl),
		kinds:      make(map[string]*kindMetrics),
		queueKinds: make(map[string]bool),
	}
}

// Attach gives the Collector the Scheduler whose running handlers, queue
// depth and dropped events it exports at scrape time; until then those
// metrics are absent. Call it once the Scheduler exists (it needs the
// Collector in its Config first). A later call replaces the Scheduler.
func (c *Collector) Attach(s *ax.Scheduler) { c.sched.Store(s) }

// Observe counts e. It is called by the Scheduler's observer goroutine.
func (c *Collector) Observe(e ax.Event) {
	switch e.Kind {
	case ax.EventLeaderChanged:
		c.leader.Store(e.Leader)
		return
	case ax.EventBackpressure:
		c.backpressure.WithLabelValues(e.JobKind).Inc()
		return
	case ax.EventKindUnhandled:
		return // ax_kind_unhandled, read from the store, says it on every host
	case ax.EventBreakerOpened:
		c.breakerTransitions.WithLabelValues(e.JobKind, string(ax.BreakerOpen)).Inc()
		return
	case ax.EventBreakerHalfOpen:
		c.breakerTransitions.WithLabelValues(e.JobKind, string(ax.BreakerHalfOpen)).Inc()
		return
	case ax.EventBreakerClosed:
		c.breakerTransitions.WithLabelValues(e.JobKind, string(ax.BreakerClosed)).Inc()
		return
	}
	if e.JobKind == "" {
		return
	}
	k := c.kind(e.JobKind)
	switch e.Kind {
	case ax.EventScheduled:
		k.scheduled.Inc()
	case ax.EventStarted:
		k.started.Inc()
		k.startLag.Observe(e.StartLag.Seconds())
	case ax.EventSucceeded:
		k.succeeded.Inc()
		k.duration.Observe(e.Duration.Seconds())
	case ax.EventFailed:
		k.failed.Inc()
		k.duration.Observe(e.Duration.Seconds())
	case ax.EventRetried:
		k.retried.Inc()
	case ax.EventDead:
		k.dead.Inc()
	case ax.EventCancelled:
		k.cancelled.Inc()
		k.duration.Observe(e.Duration.Seconds())
	case ax.EventKeyMissing:
		k.keyMissing.Inc()
	case ax.EventSnoozed:
		k.snoozed.Inc()
		k.duration.Observe(e.Duration.Seconds())
	case ax.EventLeaseLost:
		k.leaseLost.Inc()
	case ax.EventRescued:
		k.rescued.Inc()
	case ax.EventHandedBack:
		k.handedBack.Inc()
	}
}

// kind returns kind's metric children, creating them (and so the kind's
// zero-valued series) on first use.
func (c *Collector) kind(kind string) *kindMetrics {
	c.kindsMu.RLock()
	k := c.kinds[kind]
	c.kindsMu.RUnlock()
	if k != nil {
		return k
	}
	c.kindsMu.Lock()
	defer c.kindsMu.Unlock()
	if k = c.kinds[kind]; k == nil {
		k = &kindMetrics{
			scheduled:  c.scheduled.WithLabelValues(kind),
			started:    c.started.WithLabelValues(kind),
			succeeded:  c.succeeded.WithLabelValues(kind),
			failed:     c.failed.WithLabelValues(kind),
			retried:    c.retried.WithLabelValues(kind),
			dead:       c.dead.WithLabelValues(kind),
			cancelled:  c.cancelled.WithLabelValues(kind),
			snoozed:    c.snoozed.WithLabelValues(kind),
			keyMissing: c.keyMissing.WithLabelValues(kind),
			leaseLost:  c.leaseLost.WithLabelValues(kind),
			rescued:    c.rescued.WithLabelValues(kind),
			handedBack: c.handedBack.WithLabelValues(kind),
			startLag:   c.startLag.WithLabelValues(kind),
			duration:   c.duration.WithLabelValues(kind),
		}
		c.kinds[kind] = k
	}
	return k
}

// vecs returns the event-based metric vectors.
func (c *Collector) vecs() []prometheus.Collector {
	return []prometheus.Collector{
		c.scheduled, c.started, c.succeeded, c.failed, c.retried, c.dead, c.cancelled, c.snoozed, c.keyMissing, c.leaseLost,
		c.rescued, c.handedBack, c.startLag, c.duration, c.breakerTransitions, c.backpressure,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
	ch <- c.runningDesc
	ch <- c.queueDesc
	ch <- c.dueAgeDesc
	ch <- c.unhandledDesc
	ch <- c.droppedDesc
	ch <- c.queueErrDesc
	ch <- c.leaderDesc
	ch <- c.breakerStateDesc
	ch <- c.flowLimitDesc
}

// Collect implements prometheus.Collector. With a Scheduler attached it
// reads its running handlers and dropped events, and the store's job
// counts (at most once per QueueCacheTTL, within QueueTimeout).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
	leader := 0.0
	if c.leader.Load() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leaderDesc, prometheus.GaugeValue, leader)
	s := c.sched.Load()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.droppedDesc, prometheus.CounterValue, float64(s.DroppedEvents()))
	running := s.Running()
	c.kindsMu.RLock()
	for kind := range c.kinds {
		if _, ok := running[kind]; !ok {
			running[kind] = 0 // keep the series of known kinds
		}
	}
	c.kindsMu.RUnlock()
	for kind, n := range running {
		ch <- prometheus.MustNewConstMetric(c.runningDesc, prometheus.GaugeValue, float64(n), kind)
	}
	c.collectQueue(ch, s)
}

// collectQueue sends the cluster-wide metrics from a fresh or cached
// reading of the queue (Scheduler.Stats).
func (c *Collector) collectQueue(ch chan<- prometheus.Metric, s *ax.Scheduler) {
	c.queueMu.Lock()
	defer c.queueMu.Unlock()
	if now := c.opts.Clock(); c.queueAt.IsZero() || now.Sub(c.queueAt) >= c.opts.QueueCacheTTL {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.QueueTimeout)
		st, err := s.Stats(ctx)
		cancel()
		c.queueAt, c.queue = now, st
		if err != nil && !errors.Is(err, ax.ErrSchedulerClosed) {
			c.queueErrs.Add(1)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.queueErrDesc, prometheus.CounterValue, float64(c.queueErrs.Load()))
	st := c.queue
	if st == nil {
		return
	}
	for kind := range st.Queue {
		c.queueKinds[kind] = true
	}
	for kind := range st.OldestDue {
		c.queueKinds[kind] = true
	}
	for kind := range c.queueKinds {
		if st.QueueCounted {
			for _, state := range states {
				ch <- prometheus.MustNewConstMetric(c.queueDesc, prometheus.GaugeValue, float64(st.Queue[kind][state]), kind, string(state))
			}
		}
		if st.OldestDueKnown {
			ch <- prometheus.MustNewConstMetric(c.dueAgeDesc, prometheus.GaugeValue, st.DueAge(kind).Seconds(), kind)
		}
		if st.UnhandledKnown {
			v := 0.0
			if _, ok := st.Unhandled[kind]; ok {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.unhandledDesc, prometheus.GaugeValue, v, kind)
		}
	}
	for kind, f := range st.Flows {
		c.collectFlow(ch, kind, &f)
	}
}

// breakerStates are the values of ax_breaker_state's state label.
var breakerStates = []ax.BreakerState{ax.BreakerClosed, ax.BreakerOpen, ax.BreakerHalfOpen}

// collectFlow sends a kind's breaker state and flow limits.
func (c *Collector) collectFlow(ch chan<- prometheus.Metric, kind string, f *ax.FlowState) {
	cfg := &f.Config
	if !cfg.Breaker.IsZero() {
		for _, state := range breakerStates {
			v := 0.0
			if f.Breaker.State == state || (state == ax.BreakerClosed && f.Breaker.State == "") {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.breakerStateDesc, prometheus.GaugeValue, v, kind, string(state))
		}
	}
	perSecond := func(n int, per time.Duration) float64 { return float64(n) / per.Seconds() }
	limits := []struct {
		name string
		set  bool
		v    float64
	}{
		{"concurrency", cfg.Concurrency > 0, float64(cfg.Concurrency)},
		{"partition_concurrency", cfg.PartitionConcurrency > 0, float64(cfg.PartitionConcurrency)},
		{"rate_per_second", !cfg.Rate.IsZero(), perSecond(cfg.Rate.Limit, cfg.Rate.Period)},
		{"partition_rate_per_second", !cfg.PartitionRate.IsZero(), perSecond(cfg.PartitionRate.Limit, cfg.PartitionRate.Period)},
		{"max_pending", cfg.MaxPending > 0, float64(cfg.MaxPending)},
	}
	for _, l := range limits {
		if l.set {
			ch <- prometheus.MustNewConstMetric(c.flowLimitDesc, prometheus.GaugeValue, l.v, kind, l.name)
		}
	}
}
