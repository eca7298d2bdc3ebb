package ax

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// Stats is a snapshot of what a Scheduler and its store hold, returned by
// Scheduler.Stats (and, without the host's fields, by Admin.Stats).
type Stats struct {
	// Node is the Scheduler's node name; empty from Admin.Stats.
	Node string `json:"node,omitempty"`
	// At is the host time the snapshot was taken.
	At time.Time `json:"at"`
	// Workers is the host's worker slots (Config.Workers); zero from
	// Admin.Stats.
	Workers int `json:"workers,omitempty"`

	// Queue counts the store's jobs by kind and state, for the whole
	// cluster: Queue["email.send"][StateScheduled]. Counts may be
	// estimates on large tables (see the store's CountJobs). Kinds and
	// states without jobs are absent. Nil when QueueCounted is false.
	Queue map[string]map[State]int64 `json:"queue,omitempty"`
	// QueueCounted reports whether the store counts jobs (implements
	// store.Counter). memstore and pgstore do.
	QueueCounted bool `json:"queue_counted"`

	// OldestDue is, per kind with due jobs that no host has started
	// (scheduled or retrying, run time passed), the run time of the
	// oldest of them (store clock), for the whole cluster. Kinds without
	// such jobs are absent. A kind whose oldest due job keeps getting
	// older is stalled: no host handles it, every host is full, or it is
	// paused. Nil when OldestDueKnown is false. See DueAge.
	OldestDue map[string]time.Time `json:"oldest_due,omitempty"`
	// StoreNow is the store's clock when OldestDue was read.
	StoreNow time.Time `json:"store_now,omitzero"`
	// OldestDueKnown reports whether the store tells the oldest due jobs
	// (implements store.DueInspector). memstore does.
	OldestDueKnown bool `json:"oldest_due_known"`

	// Unhandled is, per kind whose jobs have been due for the
	// UnhandledKindGrace (Config's, or AdminConfig's for Admin.Stats)
	// with no running node handling it, the run time of its oldest due
	// job (store clock), for the whole cluster: such jobs wait until a
	// host that handles the kind runs (see store.UnhandledKinds). Kinds
	// that are handled are absent. Nil when UnhandledKnown is false.
	Unhandled map[string]time.Time `json:"unhandled,omitempty"`
	// UnhandledKnown reports whether the store tells the unhandled kinds
	// (implements store.DueInspector and store.NodeRegistry). memstore,
	// pgstore and sqlitestore do.
	UnhandledKnown bool `json:"unhandled_known"`

	// Flows is, per kind with flow settings (GlobalConcurrency,
	// PartitionBy, RateLimit, CircuitBreaker, MaxPending), its settings
	// and their state, for the whole cluster: the breaker, the running
	// jobs and what the rate limit allows now. Nil when FlowsKnown is
	// false.
	Flows map[string]FlowState `json:"flows,omitempty"`
	// FlowsKnown reports whether the store has flow control
	// (store.FlowStore). memstore does.
	FlowsKnown bool `json:"flows_known"`

	// Running is the number of handlers running on this host, by kind;
	// kinds with none are absent. Empty from Admin.Stats.
	Running map[string]int `json:"running,omitempty"`

	// DroppedEvents is Scheduler.DroppedEvents: events the Observers
	// missed (per-kind figures kept by observers, such as axstats, miss
	// them too).
	DroppedEvents int64 `json:"dropped_events,omitempty"`
}

// DueAge returns how long the oldest due job of kind that no host has
// started has waited, by the store's clock: StoreNow minus its run time.
// It is zero when the kind has no such job or OldestDueKnown is false.
func (s *Stats) DueAge(kind string) time.Duration {
	at, ok := s.OldestDue[kind]
	if !ok {
		return 0
	}
	return max(s.StoreNow.Sub(at), 0)
}

// Stats returns a snapshot of the Scheduler: the store's job counts by kind
// and state (one CountJobs call, when the store implements store.Counter;
// pgstore answers it from partial indexes and estimates, so it stays cheap
// with millions of rows), the oldest due unstarted job of each kind (one
// OldestDue call, when the store implements store.DueInspector), the
// kinds no running node handles (one ListNodes call more, when it also
// implements store.NodeRegistry), the
// kinds' flow settings and state (one Flows call, when the store
// implements store.FlowStore) and the handlers running on this host. Per-kind event counters and start-lag and
// run-time percentiles of this host are kept by an axstats.Observer among
// Config.Observers.
//
// It works from New on (Running is empty before Start). Errors:
// ErrSchedulerClosed once Stop has begun, or the store's error (wrapped).
// It is safe for concurrent use.
func (s *Scheduler) Stats(ctx context.Context) (*Stats, error) {
	if s.closed() {
		return nil, fmt.Errorf("stats: %w", ErrSchedulerClosed)
	}
	st := &Stats{Node: s.cfg.Node, At: s.now(), Workers: s.cfg.Workers}
	if err := queueStats(ctx, s.store, st, s.cfg.UnhandledKindGrace); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Running = s.Running()
	st.DroppedEvents = s.DroppedEvents()
	return st, nil
}

// queueStats fills the cluster-wide fields of st from the store, with
// grace as the UnhandledKindGrace.
func queueStats(ctx context.Context, s store.Store, st *Stats, grace time.Duration) error {
	if c, ok := s.(store.Counter); ok {
		counts, err := c.CountJobs(ctx)
		if err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		st.Queue, st.QueueCounted = make(map[string]map[State]int64), true
		for _, c := range counts {
			if st.Queue[c.Kind] == nil {
				st.Queue[c.Kind] = make(map[State]int64)
			}
			st.Queue[c.Kind][c.State] += c.Count
		}
	}
	if fs, ok := s.(store.FlowStore); ok {
		flows, err := fs.Flows(ctx)
		if err != nil {
			return fmt.Errorf("flows: %w", err)
		}
		st.Flows, st.FlowsKnown = make(map[string]FlowState, len(flows)), true
		for _, f := range flows {
			st.Flows[f.Config.Kind] = f
		}
	}
	if d, ok := s.(store.DueInspector); ok {
		rep, err := d.OldestDue(ctx)
		if err != nil {
			return fmt.Errorf("oldest due jobs: %w", err)
		}
		st.OldestDue, st.StoreNow, st.OldestDueKnown = make(map[string]time.Time, len(rep.Kinds)), rep.Now, true
		for _, k := range rep.Kinds {
			st.OldestDue[k.Kind] = k.OldestRunAt
		}
		if reg, ok := s.(store.NodeRegistry); ok {
			nodes, err := reg.ListNodes(ctx)
			if err != nil {
				return fmt.Errorf("nodes: %w", err)
			}
			st.Unhandled, st.UnhandledKnown = make(map[string]time.Time), true
			for _, k := range store.UnhandledKinds(nodes, rep, grace) { // unhandled.go
				st.Unhandled[k.Kind] = k.OldestRunAt
			}
		}
	}
	return nil
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
