package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Partition breakers: a circuit breaker per partition of a kind
// (FlowConfig.PartitionBreaker, keyed by the jobs' partition keys from
// FlowConfig.Partition), so that one failing partition (a tenant whose
// endpoint is down) stops only its own jobs. Each partition's breaker
// follows BreakerState's machine on its own: its failures open it, its
// jobs alone wait for its cool-down, its probe is one of its own jobs,
// and only while none of its jobs runs. The kind's breaker (Breaker), when
// it has one too, is fed by every outcome as before.
//
// State is bounded by the partitions that are failing, not by all the
// partitions: a store keeps a partition's breaker only while it is open
// or half_open or counts failures in a row; a closed breaker with no
// failure counted is forgotten (and reads closed), and Prune (a
// store.Pruner's) forgets the
// closed ones (counting failures) of partitions with no job scheduled,
// retrying or running, so that partitions that failed once and never ran
// again do not stay. That is why a
// partition breaker opens on Failures in a row only (no FailureRatio:
// its windows would keep a state for every partition that ran a job).
//
// It is an optional ability of a FlowStore: a FlowStore that is not a
// PartitionBreakerStore must not be handed a FlowConfig with a
// PartitionBreaker (the scheduler refuses the option at registration).

// PartitionBreakerStore is implemented by FlowStores that keep a circuit
// breaker per partition (FlowConfig.PartitionBreaker). Claim applies each
// partition's breaker to its jobs as FlowStore documents for a kind's
// (closed: jobs start; open before its cool-down ends: none of the
// partition's jobs starts, and ClaimResult.NextRunAt counts them at the
// end of the cool-down; open past it, or half_open: one probe, only while
// none of the partition's jobs runs, reported in ClaimResult.Breakers);
// Finish feeds the breaker of each applied row's partition; when a
// running job of a partition whose breaker is not closed leaves running,
// listeners of its kind are notified.
type PartitionBreakerStore interface {
	FlowStore

	// PartitionBreakers returns the breakers a store keeps for kind's
	// partitions (open, half_open, or closed with failures counted),
	// ordered by partition key; a partition not listed reads closed.
	// A kind without a partition breaker fails with ErrNotFound.
	PartitionBreakers(ctx context.Context, kind string) ([]PartitionBreakerState, error)

	// SetPartitionBreaker opens (open = true, for the PartitionBreaker's
	// CoolDown) or closes the breaker of kind's partition key by hand.
	// It fails with ErrNotFound when the kind has no partition breaker,
	// ErrInvalidParams for a kind or key that is not a storable text.
	// Closing notifies listeners of the kind.
	SetPartitionBreaker(ctx context.Context, kind, key string, open bool) (*SetPartitionBreakerResult, error)
}

// PartitionBreakerState is one partition's breaker, as a store keeps it.
type PartitionBreakerState struct {
	Kind string `json:"kind"`
	// PartitionKey is the partition's key ("" is the partition of the
	// jobs without a key).
	PartitionKey string `json:"partition_key"`
	// Breaker is the breaker (State reads closed when the store keeps
	// none).
	Breaker BreakerStatus `json:"breaker"`
	// Running counts the partition's running jobs, cluster-wide.
	Running int64 `json:"running"`
	// Now is the store's clock at the reading.
	Now time.Time `json:"now"`
}

// SetPartitionBreakerResult is what SetPartitionBreaker did.
type SetPartitionBreakerResult struct {
	// State is the partition's breaker afterwards.
	State PartitionBreakerState
	// Transition is the change made (its Partitioned set), or nil when
	// the breaker already was in the requested state.
	Transition *BreakerTransition
}

// CheckPartitionBreaker reports, wrapping ErrInvalidParams, a kind or key
// that a SetPartitionBreaker or PartitionBreakers call cannot name (an
// empty kind, or either not a storable text); what names the call, for
// the message.
func CheckPartitionBreaker(what, kind, key string) error {
	if kind == "" {
		return fmt.Errorf("%s: %w: empty kind", what, ErrInvalidParams)
	}
	if err := CheckText(kind, MaxKindLength); err != nil {
		return fmt.Errorf("%s: %w: kind: %w", what, ErrInvalidParams, err)
	}
	if err := CheckText(key, MaxPartitionKeyLength); err != nil {
		return fmt.Errorf("%s: %w: partition key: %w", what, ErrInvalidParams, err)
	}
	return nil
}

// Forgettable reports whether a store may forget a partition's breaker
// b (and read it closed): it is closed with no failure counted. A
// partition breaker has no ratio window (FlowConfig.Validate refuses a
// FailureRatio), so nothing else is lost.
func (b *BreakerStatus) Forgettable() bool { return b.Closed() && b.Failures == 0 }

// ForPartition marks t, a transition of a partition's breaker, with the
// partition's key, and returns it.
func (t *BreakerTransition) ForPartition(key string) *BreakerTransition {
	if t != nil {
		t.Partitioned, t.PartitionKey = true, key
	}
	return t
}

// PartitionBreakerHold says what a partition's breaker b lets a claim at
// now do with the partition's jobs, running of them running: start them
// (ok), none until at (the end of its cool-down), or none until a
// running job of the partition ends (ok false, at zero). probe reports
// that a job it starts is a probe (at most one). It is the reference
// stores follow for Claim.
func (b *BreakerStatus) PartitionBreakerHold(now time.Time, running int64) (ok, probe bool, at time.Time) {
	switch {
	case b.Closed():
		return true, false, time.Time{}
	case b.State == BreakerOpen && now.Before(b.ProbeAt):
		return false, false, b.ProbeAt
	case running > 0:
		return false, false, time.Time{}
	}
	return true, true, time.Time{}
}

// RefusePartitionBreakers returns an error wrapping errors.ErrUnsupported
// when p sets a PartitionBreaker: the SetFlows of a FlowStore that is not
// a PartitionBreakerStore calls it, so that a breaker it would not apply
// is never stored as if it were.
func RefusePartitionBreakers(p *SetFlowsParams) error {
	for i := range p.Flows {
		if !p.Flows[i].PartitionBreaker.IsZero() {
			return fmt.Errorf("kind %q: partition breakers: %w", p.Flows[i].Kind, errors.ErrUnsupported)
		}
	}
	return nil
}
