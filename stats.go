package ax

import (
	"context"
	"fmt"
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

	// DroppedEvents is Scheduler.DroppedEvents: events the Observers
	// missed (per-kind figures kept by observers, such as axstats, miss
	// them too).
	DroppedEvents int64
}

// Stats returns a snapshot of the Scheduler: the store's job counts by kind
// and state (one CountJobs call, when the store implements store.Counter;
// pgstore answers it from partial indexes and estimates, so it stays cheap
// with millions of rows) and the handlers running on this host. Per-kind
// event counters and start-lag and run-time percentiles of this host are
// kept by an axstats.Observer among Config.Observers.
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
