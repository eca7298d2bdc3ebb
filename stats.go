package ax

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/axsched/ax/store"
)

// Stats is a snapshot of what a Scheduler and its store hold, returned by
// Scheduler.Stats.
type Stats struct {
	// Node is the Scheduler's node name.
	Node string
	// At is the host time the snapshot was taken.
	At time.Time
	// Workers is the host's worker slots (Config.Workers).
	Workers int

	// Queue counts the store's jobs by kind and state, for the whole
	// cluster: Queue["email.send"][StateScheduled]. Counts may be
	// estimates on large tables (see the store's CountJobs). Kinds and
	// states without jobs are absent. Nil when QueueCounted is false.
	Queue map[string]map[State]int64
	// QueueCounted reports whether the store counts jobs (implements
	// store.Counter). memstore and pgstore do.
	QueueCounted bool

	// Running is the number of handlers running on this host, by kind;
	// kinds with none are absent.
	Running map[string]int

	// Kinds holds the in-process counters and percentiles by kind, from
	// the first *StatsObserver in Config.Observers. Nil without one.
	Kinds map[string]KindStats

	// DroppedEvents is Scheduler.DroppedEvents: events the Observers
	// missed, and so Kinds did not count.
	DroppedEvents int64
}

// KindStats is what one host saw of one kind: event counters since the
// StatsObserver was created, and start lag and run time percentiles over
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

	// StartLag is start minus run_at (store clock) of the attempts
	// started in the window.
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

// StatsConfig configures a StatsObserver. The zero value means the
// documented defaults.
type StatsConfig struct {
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

// Defaults of StatsConfig.
const (
	DefaultStatsWindow  = 5 * time.Minute
	DefaultStatsSamples = 1024
)

// StatsObserver is an Observer keeping per-kind event counters and start
// lag and run time samples in memory. Add it to Config.Observers and
// Scheduler.Stats reports what it counted:
//
//	so := ax.NewStatsObserver(ax.StatsConfig{})
//	s, err := ax.New(ax.Config{Store: st, Observers: []ax.Observer{so}})
//
// Its memory is bounded: a few counters and two rings of StatsConfig.Samples
// durations per kind. Observing an event takes constant time; the
// percentiles are computed (by sorting at most Samples durations per kind)
// only by Snapshot. It is safe for concurrent use, also shared by several
// Schedulers.
//
// Its figures lag reality by the events still in the Scheduler's buffer,
// and miss dropped events (Stats.DroppedEvents).
type StatsObserver struct {
	window  time.Duration
	samples int
	now     func() time.Time

	mu    sync.Mutex
	kinds map[string]*kindCounters
}

// kindCounters is one kind's figures in a StatsObserver.
type kindCounters struct {
	KindStats // counters only; the percentiles come from the rings
	lag       sampleRing
	run       sampleRing
}

// NewStatsObserver returns a StatsObserver configured by cfg. Negative
// Window or Samples are treated as their defaults.
func NewStatsObserver(cfg StatsConfig) *StatsObserver {
	if cfg.Window <= 0 {
		cfg.Window = DefaultStatsWindow
	}
	if cfg.Samples <= 0 {
		cfg.Samples = DefaultStatsSamples
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &StatsObserver{window: cfg.Window, samples: cfg.Samples, now: cfg.Clock, kinds: make(map[string]*kindCounters)}
}

// Observe counts e. Events without a job kind (EventLeaderChanged) are
// ignored.
func (o *StatsObserver) Observe(e Event) {
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
	case EventScheduled:
		k.Scheduled++
	case EventStarted:
		k.Started++
		k.lag.add(e.At, e.StartLag)
	case EventSucceeded:
		k.Succeeded++
		k.run.add(e.At, e.Duration)
	case EventFailed:
		k.Failed++
		k.run.add(e.At, e.Duration)
	case EventRetried:
		k.Retried++
	case EventDead:
		k.Dead++
	case EventCancelled:
		k.Cancelled++
		k.run.add(e.At, e.Duration)
	case EventSnoozed:
		k.Snoozed++
		k.run.add(e.At, e.Duration)
	case EventLeaseLost:
		k.LeaseLost++
	}
}

// Snapshot returns the figures of every kind seen so far, with the
// percentiles of the samples within the window ending now.
func (o *StatsObserver) Snapshot() map[string]KindStats {
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

// Stats returns a snapshot of the Scheduler: the store's job counts by kind
// and state (one CountJobs call, when the store implements store.Counter;
// pgstore answers it from partial indexes and estimates, so it stays cheap
// with millions of rows), the handlers running on this host, and the
// figures of the first *StatsObserver in Config.Observers.
//
// It works from New on (Running is empty before Start). Errors:
// ErrSchedulerClosed once Stop has begun, or the store's error (wrapped).
// It is safe for concurrent use.
func (s *Scheduler) Stats(ctx context.Context) (*Stats, error) {
	if s.closed() {
		return nil, fmt.Errorf("stats: %w", ErrSchedulerClosed)
	}
	st := &Stats{Node: s.cfg.Node, At: s.now(), Workers: s.cfg.Workers}
	if c, ok := s.store.(store.Counter); ok {
		counts, err := c.CountJobs(ctx)
		if err != nil {
			return nil, fmt.Errorf("stats: count jobs: %w", err)
		}
		st.Queue, st.QueueCounted = make(map[string]map[State]int64), true
		for _, c := range counts {
			if st.Queue[c.Kind] == nil {
				st.Queue[c.Kind] = make(map[State]int64)
			}
			st.Queue[c.Kind][c.State] += c.Count
		}
	}
	st.Running = s.Running()
	for _, o := range s.cfg.Observers {
		if so, ok := o.(*StatsObserver); ok {
			st.Kinds = so.Snapshot()
			break
		}
	}
	st.DroppedEvents = s.DroppedEvents()
	return st, nil
}

// Running returns the number of handlers running on this host, by kind;
// kinds with none are absent. It reads in-memory counters only, so it is
// cheap enough for every metrics scrape. Before Start it returns an empty
// map.
func (s *Scheduler) Running() map[string]int {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return map[string]int{}
	}
	return run.running()
}
