package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/axsched/ax/store"
)

// Compile-time check of the flow-control ability.
var _ store.FlowStore = (*Store)(nil)

// Flow control (store.FlowStore): every rule is applied under the store's
// lock, so memstore is the exact reference of the contract. Claims read
// the counters the indexes keep (running jobs per kind and per partition,
// sequences' first jobs); Finish feeds the breakers; Insert checks the
// pending bounds against counters, never by counting jobs.

// flowState is a kind's stored flow settings and state.
type flowState struct {
	cfg        store.FlowConfig
	declaredBy string
	declaredAt time.Time
	breaker    store.BreakerStatus
	// tat is the kind's rate bucket (its theoretical arrival time; zero:
	// full) and partTAT the partitions' buckets.
	tat     time.Time
	partTAT map[string]time.Time
	// partBreakers holds the breakers of the failing partitions (with
	// cfg.PartitionBreaker; see partitionbreaker.go).
	partBreakers map[string]*store.BreakerStatus
}

// SetFlows stores each kind's flow settings in place of what was stored,
// as store.FlowStore documents: a config that sets nothing removes the
// kind's settings and state; the breaker's state is kept while the kind
// keeps a breaker, and the rate buckets while it keeps the same kind of
// rate. Invalid params fail with an error wrapping store.ErrInvalidParams
// and change nothing.
func (s *Store) SetFlows(ctx context.Context, params *store.SetFlowsParams) error {
	if params == nil {
		return fmt.Errorf("set flows: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("set flows: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("set flows: %w", err)
	}
	now := s.clock()
	var ns notes
	for _, cfg := range params.Flows {
		f := s.flows[cfg.Kind]
		if cfg.IsZero() {
			if f != nil {
				delete(s.flows, cfg.Kind)
				s.wake(cfg.Kind, now) // whatever it held back may start
			}
			continue
		}
		if f == nil {
			f = &flowState{}
			s.flows[cfg.Kind] = f
		}
		if cfg.Breaker.IsZero() {
			f.breaker = store.BreakerStatus{}
		}
		if cfg.Rate.IsZero() {
			f.tat = time.Time{}
		}
		if cfg.PartitionRate.IsZero() || cfg.Partition != f.cfg.Partition {
			f.partTAT = nil
		}
		if cfg.PartitionBreaker.IsZero() || cfg.Partition != f.cfg.Partition {
			f.partBreakers = nil
		}
		f.cfg, f.declaredBy, f.declaredAt = cfg, params.Node, now
		s.wake(cfg.Kind, now) // a limit may have grown
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return nil
}

// Flows returns the state of every kind with stored settings, ordered by
// kind; see store.FlowStore.
func (s *Store) Flows(ctx context.Context) ([]store.FlowState, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	out := make([]store.FlowState, 0, len(s.flows))
	for kind := range s.flows {
		out = append(out, s.flowStateLocked(kind, now))
	}
	slices.SortFunc(out, func(a, b store.FlowState) int { return strings.Compare(a.Config.Kind, b.Config.Kind) })
	return out, nil
}

// flowStateLocked returns the state of kind, which has stored settings.
func (s *Store) flowStateLocked(kind string, now time.Time) store.FlowState {
	f := s.flows[kind]
	var running int64
	if k := s.kinds[kind]; k != nil {
		running = int64(k.counts[stateIndex(store.StateRunning)])
	}
	st := store.NewFlowState(f.cfg, f.declaredBy, f.declaredAt, f.breaker, f.tat, running, now)
	st.PartitionBreakersOpen = f.openPartBreakers()
	return st
}

// SetBreaker opens (for the kind's CoolDown) or closes the kind's breaker
// by hand; see store.FlowStore. A kind without a breaker fails with an
// error wrapping store.ErrNotFound. Closing notifies subscribers of the
// kind.
func (s *Store) SetBreaker(ctx context.Context, kind string, open bool) (*store.SetBreakerResult, error) {
	if err := store.CheckBreakerKind(kind, open); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("set breaker: %w", err) // the caller names the kind and verb (Admin.SetBreaker)
	}
	f := s.flows[kind]
	if f == nil || f.cfg.Breaker.IsZero() {
		s.mu.Unlock()
		return nil, fmt.Errorf("set breaker: %w: the kind has no circuit breaker", store.ErrNotFound)
	}
	now := s.clock()
	res := &store.SetBreakerResult{Transition: f.breaker.Set(&f.cfg.Breaker, kind, open, now)}
	res.State = s.flowStateLocked(kind, now)
	var ns notes
	if res.Transition != nil && !open {
		s.wake(kind, now)
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return res, nil
}

// FinishFlow is Finish, also returning the breaker transitions the
// outcomes made; see store.FlowStore.
func (s *Store) FinishFlow(ctx context.Context, params []store.FinishParams) (*store.FinishResult, error) {
	ok, transitions, err := s.finish(ctx, params)
	if err != nil {
		return nil, err
	}
	return &store.FinishResult{OK: ok, Breakers: transitions}, nil
}

// observeBreaker feeds the breaker of the kind of a job whose attempt
// ended with out (the partition's breaker is observePartBreaker's).
// Called with s.mu held.
func (s *Store) observeBreaker(kind string, out store.Outcome, now time.Time) *store.BreakerTransition {
	f := s.flows[kind]
	if f == nil || f.cfg.Breaker.IsZero() {
		return nil
	}
	switch out {
	case store.OutcomeSucceeded:
		return f.breaker.Observe(&f.cfg.Breaker, kind, false, now)
	case store.OutcomeRetry, store.OutcomeDead:
		return f.breaker.Observe(&f.cfg.Breaker, kind, true, now)
	}
	return nil
}

// partitionKey derives the partition key of a job to insert from its
// kind's stored partition source. Called with s.mu held.
func (s *Store) partitionKey(p *store.InsertParams) (string, error) {
	f := s.flows[p.Kind]
	if f == nil || f.cfg.Partition.IsZero() {
		return "", nil
	}
	return store.PartitionKeyOf(f.cfg.Partition, p.Metadata, p.Payload)
}

// checkPending refuses an insert that would take the pending jobs of a
// kind past its MaxPending, or of all kinds past a row's PendingLimit,
// counting every row of the call (duplicates too). Called with s.mu held.
func (s *Store) checkPending(params []store.InsertParams) error {
	var rows map[string]int
	limit := 0
	for i := range params {
		p := &params[i]
		if p.PendingLimit > 0 && (limit == 0 || p.PendingLimit < limit) {
			limit = p.PendingLimit
		}
		if f := s.flows[p.Kind]; f != nil && f.cfg.MaxPending > 0 {
			if rows == nil {
				rows = make(map[string]int)
			}
			rows[p.Kind]++
		}
	}
	for kind, n := range rows {
		max := s.flows[kind].cfg.MaxPending
		var pending int64
		if k := s.kinds[kind]; k != nil {
			pending = k.counts[stateIndex(store.StateScheduled)] + k.counts[stateIndex(store.StateRetrying)]
		}
		if pending+int64(n) > int64(max) {
			return &store.PendingLimitError{Kind: kind, Pending: int(min(pending, int64(max))), Limit: max}
		}
	}
	if limit > 0 && s.pending+int64(len(params)) > int64(limit) {
		return &store.PendingLimitError{Pending: int(min(s.pending, int64(limit))), Limit: limit}
	}
	return nil
}
