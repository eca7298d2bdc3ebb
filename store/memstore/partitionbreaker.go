package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/axsched/ax/store"
)

// Compile-time check of the partition breakers.
var _ store.PartitionBreakerStore = (*Store)(nil)

// Partition breakers (store.PartitionBreakerStore): a kind's flowState
// keeps, in partBreakers, the breakers of its failing partitions only;
// one that closes with no failure counted is deleted, so the map grows
// with the failing partitions, not with all of them.

// partBreaker returns the breaker of partition key of f (nil: closed,
// none kept).
func (f *flowState) partBreaker(key string) *store.BreakerStatus {
	return f.partBreakers[key]
}

// keepPartBreaker stores b as the breaker of partition key of f, or
// forgets it when it may be (closed, no failure counted).
func (f *flowState) keepPartBreaker(key string, b *store.BreakerStatus) {
	if b.Forgettable() {
		delete(f.partBreakers, key)
		return
	}
	if f.partBreakers == nil {
		f.partBreakers = make(map[string]*store.BreakerStatus)
	}
	f.partBreakers[key] = b
}

// openPartBreakers counts f's partitions whose breaker is not closed.
func (f *flowState) openPartBreakers() int {
	n := 0
	for _, b := range f.partBreakers {
		if !b.Closed() {
			n++
		}
	}
	return n
}

// observePartBreaker feeds the breaker of the partition of r, of a kind
// with a partition breaker, the outcome out of its attempt. Called with
// s.mu held.
func (s *Store) observePartBreaker(r *store.JobRecord, out store.Outcome, now time.Time) *store.BreakerTransition {
	f := s.flows[r.Kind]
	if f == nil || f.cfg.PartitionBreaker.IsZero() {
		return nil
	}
	var failed bool
	switch out {
	case store.OutcomeSucceeded:
	case store.OutcomeRetry, store.OutcomeDead:
		failed = true
	default:
		return nil
	}
	b := f.partBreaker(r.PartitionKey)
	if b == nil {
		if !failed {
			return nil // closed, nothing counted: nothing to reset
		}
		b = &store.BreakerStatus{}
	}
	t := b.Observe(&f.cfg.PartitionBreaker, r.Kind, failed, now).ForPartition(r.PartitionKey)
	f.keepPartBreaker(r.PartitionKey, b)
	return t
}

// partBreakerHold applies the breaker of partition p of the kind w to a
// claim at now; see store.BreakerStatus.PartitionBreakerHold.
func (w *want) partBreakerHold(p *partIndex, now time.Time) (ok bool, at time.Time) {
	if w.f == nil || w.f.cfg.PartitionBreaker.IsZero() {
		return true, time.Time{}
	}
	b := w.f.partBreaker(p.key)
	if b == nil {
		return true, time.Time{}
	}
	ok, _, at = b.PartitionBreakerHold(now, int64(p.running))
	return ok, at
}

// probePartBreaker moves the breaker of the partition of j, just
// claimed, to half_open when the claim started its probe, and returns
// the transition.
func (w *want) probePartBreaker(j *job, now time.Time) *store.BreakerTransition {
	if w.f == nil || w.f.cfg.PartitionBreaker.IsZero() {
		return nil
	}
	b := w.f.partBreaker(j.rec.PartitionKey)
	if b == nil {
		return nil
	}
	return b.Probe(w.k.name, now).ForPartition(j.rec.PartitionKey)
}

// partRunning returns how many jobs of kind's partition key run.
func (s *Store) partRunning(kind, key string) int64 {
	if k := s.kinds[kind]; k != nil {
		if p := k.parts[key]; p != nil {
			return int64(p.running)
		}
	}
	return 0
}

// partBreakerFlow returns the flow settings of kind when it has a
// partition breaker, or an error wrapping store.ErrNotFound. Called with
// s.mu held.
func (s *Store) partBreakerFlow(kind string) (*flowState, error) {
	f := s.flows[kind]
	if f == nil || f.cfg.PartitionBreaker.IsZero() {
		return nil, fmt.Errorf("%w: kind %q has no partition breaker", store.ErrNotFound, kind)
	}
	return f, nil
}

// PartitionBreakers returns the breakers kept for kind's partitions
// (open, half_open, or closed with failures counted), ordered by key; see
// store.PartitionBreakerStore.
func (s *Store) PartitionBreakers(ctx context.Context, kind string) ([]store.PartitionBreakerState, error) {
	if err := store.CheckPartitionBreaker("partition breakers", kind, ""); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("partition breakers of %q: %w", kind, err)
	}
	defer s.mu.Unlock()
	f, err := s.partBreakerFlow(kind)
	if err != nil {
		return nil, fmt.Errorf("partition breakers: %w", err)
	}
	now := s.clock()
	out := make([]store.PartitionBreakerState, 0, len(f.partBreakers))
	for key, b := range f.partBreakers {
		out = append(out, store.PartitionBreakerState{Kind: kind, PartitionKey: key, Breaker: *b,
			Running: s.partRunning(kind, key), Now: now})
	}
	slices.SortFunc(out, func(a, b store.PartitionBreakerState) int { return strings.Compare(a.PartitionKey, b.PartitionKey) })
	return out, nil
}

// SetPartitionBreaker opens (for the partition breaker's CoolDown) or
// closes the breaker of kind's partition key by hand; see
// store.PartitionBreakerStore. Closing notifies subscribers of the kind.
func (s *Store) SetPartitionBreaker(ctx context.Context, kind, key string, open bool) (*store.SetPartitionBreakerResult, error) {
	what := store.BreakerVerb(open) + " partition breaker"
	if err := store.CheckPartitionBreaker(what, kind, key); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("%s of %q: %w", what, kind, err)
	}
	f, err := s.partBreakerFlow(kind)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	now := s.clock()
	b := f.partBreaker(key)
	if b == nil {
		b = &store.BreakerStatus{}
	}
	res := &store.SetPartitionBreakerResult{
		Transition: b.Set(&f.cfg.PartitionBreaker, kind, open, now).ForPartition(key),
	}
	f.keepPartBreaker(key, b)
	res.State = store.PartitionBreakerState{Kind: kind, PartitionKey: key, Breaker: *b, Running: s.partRunning(kind, key), Now: now}
	if res.State.Breaker.State == "" {
		res.State.Breaker.State = store.BreakerClosed
	}
	var ns notes
	if res.Transition != nil && !open {
		s.wake(kind, now)
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return res, nil
}

// forgetIdlePartBreakers forgets the closed breakers (counting failures)
// of kind's partitions that have no claimable or running job, as Prune
// does. Called with s.mu held.
func (s *Store) forgetIdlePartBreakers(kind string, f *flowState) {
	k := s.kinds[kind]
	for key, b := range f.partBreakers {
		if !b.Closed() {
			continue
		}
		if k == nil || k.parts[key] == nil || k.parts[key].empty() {
			delete(f.partBreakers, key)
		}
	}
}
