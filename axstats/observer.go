// Package axstats keeps, in memory, what one host saw of each job kind:
// event counters since start and start-lag and run-time percentiles over a
// sliding window. It is an ax.Observer; add it to ax.Config.Observers.
//
// It is the in-process view of one host. The store's view of the whole
// cluster (queue depth by kind and state) is ax.Scheduler.Stats, and
// Prometheus metrics are axprom's.
package axstats

import (
	"slices"
	"sync"
	"time"

	"github.com/axsched/ax"
)

// KindStats is what one host saw of one kind: event counters since the
// Observer was created, and start lag and run time percentiles over
// its sliding window.
type KindStats struct {
	Scheduled int64
	Started   int64
	Succeeded int64
	// Failed counts failed attempts; each is then also counted as
	// Retried or Dead.
	Failed    int64
	Retried   int64
	Dead      int64
	Cancelled int64
	Snoozed   int64
	LeaseLost int64

	// StartLag is the start lag (ax.Event.StartLag: the handler's start
	// on the host clock minus run_at) of the attempts started in the
	// window.
	StartLag Percentiles
	// RunTime is the handler run time of the attempts finished in the
	// window (every outcome but a lost lease).
	RunTime Percentiles
}

// Percentiles summarizes durations sampled over a sliding window. The
// percentiles are exact (nearest rank) over the samples kept; all fields
// are zero when Count is zero.
type Percentiles struct {
	// Count is the number of samples summarized.
	Count int
	P50   time.Duration
	P90   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// Config configures an Observer. The zero value means the
// documented defaults.
type Config struct {
	// Window is how far back the percentiles look. Defaults to 5 minutes.
	Window time.Duration
	// Samples caps the samples kept per kind and measure, so memory stays
	// bounded however busy the kind: the percentiles cover the last
	// Samples events within Window. Defaults to 1024.
	Samples int
	// Clock tells the time the window ends at, for tests. Defaults to
	// time.Now. Samples are stamped with Event.At.
	Clock func() time.Time
}

// Defaults of Config.
const (
	DefaultWindow  = 5 * time.Minute
	DefaultSamples = 1024
)

// Observer is an ax.Observer keeping per-kind event counters and start
// lag and run time samples in memory. Add it to ax.Config.Observers and
// read its figures with Snapshot:
//
//	so := axstats.New(axstats.Config{})
//	s, err := ax.New(ax.Config{Store: st, Observers: []ax.Observer{so}})
//	...
//	mail := so.Snapshot()["mail.send"] // counters, StartLag and RunTime percentiles
//
// Its memory is bounded: a few counters and two rings of Config.Samples
// durations per kind. Observing an event takes constant time; the
// percentiles are computed (by sorting at most Samples durations per kind)
// only by Snapshot. It is safe for concurrent use, also shared by several
// Schedulers.
//
// Its figures lag reality by the events still in the Scheduler's buffer,
// and miss dropped events (ax.Scheduler.DroppedEvents).
type Observer struct {
	window  time.Duration
	samples int
	now     func() time.Time

	mu    sync.Mutex
	kinds map[string]*kindCounters
}

// kindCounters is one kind's figures in a Observer.
type kindCounters struct {
	KindStats // counters only; the percentiles come from the rings
	lag       sampleRing
	run       sampleRing
}

// New returns a Observer configured by cfg. Negative
// Window or Samples are treated as their defaults.
func New(cfg Config) *Observer {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Samples <= 0 {
		cfg.Samples = DefaultSamples
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Observer{window: cfg.Window, samples: cfg.Samples, now: cfg.Clock, kinds: make(map[string]*kindCounters)}
}

// Observe counts e. Events without a job kind (EventLeaderChanged) are
// ignored.
func (o *Observer) Observe(e ax.Event) {
	if e.JobKind == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	k := o.kinds[e.JobKind]
	if k == nil {
		k = &kindCounters{lag: newSampleRing(o.samples), run: newSampleRing(o.samples)}
		o.kinds[e.JobKind] = k
	}
	switch e.Kind {
	case ax.EventScheduled:
		k.Scheduled++
	case ax.EventStarted:
		k.Started++
		k.lag.add(e.At, e.StartLag)
	case ax.EventSucceeded:
		k.Succeeded++
		k.run.add(e.At, e.Duration)
	case ax.EventFailed:
		k.Failed++
		k.run.add(e.At, e.Duration)
	case ax.EventRetried:
		k.Retried++
	case ax.EventDead:
		k.Dead++
	case ax.EventCancelled:
		k.Cancelled++
		k.run.add(e.At, e.Duration)
	case ax.EventSnoozed:
		k.Snoozed++
		k.run.add(e.At, e.Duration)
	case ax.EventLeaseLost:
		k.LeaseLost++
	}
}

// Snapshot returns the figures of every kind seen so far, with the
// percentiles of the samples within the window ending now.
func (o *Observer) Snapshot() map[string]KindStats {
	since := o.now().Add(-o.window)
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]KindStats, len(o.kinds))
	for kind, k := range o.kinds {
		ks := k.KindStats
		ks.StartLag = k.lag.percentiles(since)
		ks.RunTime = k.run.percentiles(since)
		out[kind] = ks
	}
	return out
}

// sampleRing keeps the last len(v) durations with their times.
type sampleRing struct {
	at   []time.Time
	v    []time.Duration
	next int
	full bool
}

func newSampleRing(n int) sampleRing {
	return sampleRing{at: make([]time.Time, n), v: make([]time.Duration, n)}
}

func (r *sampleRing) add(at time.Time, v time.Duration) {
	r.at[r.next], r.v[r.next] = at, v
	r.next++
	if r.next == len(r.v) {
		r.next, r.full = 0, true
	}
}

// percentiles summarizes the samples taken at or after since.
func (r *sampleRing) percentiles(since time.Time) Percentiles {
	n := r.next
	if r.full {
		n = len(r.v)
	}
	vs := make([]time.Duration, 0, n)
	for i := range n {
		if !r.at[i].Before(since) {
			vs = append(vs, r.v[i])
		}
	}
	if len(vs) == 0 {
		return Percentiles{}
	}
	slices.Sort(vs)
	return Percentiles{
		Count: len(vs),
		P50:   nearestRank(vs, 50),
		P90:   nearestRank(vs, 90),
		P99:   nearestRank(vs, 99),
		Max:   vs[len(vs)-1],
	}
}

// nearestRank returns the p-th percentile of sorted vs: the smallest value
// with at least p% of the values at or below it.
func nearestRank(vs []time.Duration, p int) time.Duration {
	rank := (len(vs)*p + 99) / 100 // ceil(len * p / 100), at least 1 for p > 0
	return vs[max(rank, 1)-1]
}
