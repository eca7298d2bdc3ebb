package ax

import (
	"context"
	"errors"
	"fmt"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// PartitionBreaker gives each partition of the kind its own circuit
// breaker, cluster-wide: a partition's failed attempts open only that
// partition's breaker, its jobs alone wait for the cool-down, its probe
// is one of its own jobs, and every other partition's jobs start as
// usual. A tenant whose endpoint is down then stops only its jobs, where
// the kind's breaker (CircuitBreaker) would stop every tenant's.
//
//	ax.Handle(s, "webhook.deliver", deliver,
//		ax.PartitionBreaker(ax.PartitionByMetadata("subscriber"),
//			ax.BreakerConfig{Failures: 5, CoolDown: 30 * time.Second}))
//
// Jobs are partitioned by src as with PartitionBy (which may be given
// too, with the same source; the kind has one). Each partition's breaker
// follows BreakerConfig's state machine with c, but opens on Failures in
// a row only: a FailureRatio is an error wrapping ErrInvalidOption (its
// windows would keep a state for every partition; the store keeps one
// only for partitions that fail). A kind may have both breakers: every
// outcome feeds the kind's and its partition's.
//
// Transitions are the events of CircuitBreaker, with Event.Partitioned
// and Event.PartitionKey set, and log lines; the open ones are listed by
// Admin.PartitionBreakers and `ax kinds partitions`, and
// FlowState.PartitionBreakersOpen counts them. Operators open and close
// one by hand with Admin.OpenPartitionBreaker and ClosePartitionBreaker.
//
// It needs a store that keeps partition breakers
// (store.PartitionBreakerStore: memstore, sqlitestore and pgstore do):
// Handle refuses it on another store with an error wrapping
// errors.ErrUnsupported, so no job ever fails for it. On PostgreSQL,
// claims of the kind are decided with the kind's flows row held (two
// round trips, as with a partition rate), and an outcome written by
// CompleteTx does not feed its partition's breaker.
func PartitionBreaker(src PartitionSource, c BreakerConfig) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		if src.src.IsZero() {
			return fmt.Errorf("%w: PartitionBreaker needs a metadata key or a payload field", ErrInvalidOption)
		}
		if c.FailureRatio != 0 || c.Window != 0 || c.MinAttempts != 0 {
			return fmt.Errorf("%w: PartitionBreaker opens on Failures in a row only (no FailureRatio, Window or MinAttempts)", ErrInvalidOption)
		}
		sc, err := c.storeConfig("PartitionBreaker")
		if err != nil {
			return err
		}
		if err := h.setPartition("PartitionBreaker", src); err != nil {
			return err
		}
		h.flow.PartitionBreaker, h.flowSet = sc, true
		h.storeChecks = append(h.storeChecks, func(st store.Store) error {
			_, err := partitionBreakerStoreOf(st)
			return err
		})
		return nil
	})
}

// PartitionBreakerState is one partition's circuit breaker, as
// Admin.PartitionBreakers lists it: the kind, the partition key, the
// breaker and the partition's running jobs.
type PartitionBreakerState = store.PartitionBreakerState

// partitionBreakerStoreOf returns st's PartitionBreakerStore, or an error
// wrapping errors.ErrUnsupported.
func partitionBreakerStoreOf(st store.Store) (store.PartitionBreakerStore, error) {
	ps, ok := st.(store.PartitionBreakerStore)
	if !ok {
		return nil, fmt.Errorf("PartitionBreaker: store %T keeps no partition breakers (store.PartitionBreakerStore): %w",
			st, errors.ErrUnsupported)
	}
	return ps, nil
}

// PartitionBreakers lists the breakers the store keeps for kind's
// partitions, ordered by partition key: the open and half-open ones, and
// closed ones counting failures in a row. A partition not listed is
// closed. Errors: ErrInvalidKind, ErrNotFound (the kind has no
// PartitionBreaker), errors.ErrUnsupported (the store keeps no partition
// breakers), or the store's error.
func (a *Admin) PartitionBreakers(ctx context.Context, kind string) ([]PartitionBreakerState, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("partition breakers: %w", err)
	}
	if err := checkKind(kind); err != nil {
		return nil, fmt.Errorf("partition breakers: %w", err)
	}
	ps, err := partitionBreakerStoreOf(a.store)
	if err != nil {
		return nil, fmt.Errorf("partition breakers: %w", err)
	}
	list, err := ps.PartitionBreakers(ctx, kind)
	if err != nil {
		return nil, fmt.Errorf("partition breakers of %q: %w", kind, err)
	}
	return list, nil
}

// OpenPartitionBreaker opens the breaker of kind's partition key by hand,
// across the cluster: none of the partition's jobs starts until its
// cool-down has passed, then a probe runs as after any opening
// (ClosePartitionBreaker ends it sooner); the other partitions go on. It
// returns the partition's breaker afterwards. Errors: ErrInvalidKind,
// ErrInvalidOption (a key that is not valid UTF-8 of at most 1,024 bytes
// without NUL), ErrNotFound (no running host declared a PartitionBreaker
// for the kind), errors.ErrUnsupported (the store keeps no partition
// breakers), or the store's error.
func (a *Admin) OpenPartitionBreaker(ctx context.Context, kind, key string) (*PartitionBreakerState, error) {
	return a.setPartitionBreaker(ctx, kind, key, true)
}

// ClosePartitionBreaker closes the breaker of kind's partition key by
// hand: its jobs start again at once on every host (the store notifies
// them). Errors are as for OpenPartitionBreaker.
func (a *Admin) ClosePartitionBreaker(ctx context.Context, kind, key string) (*PartitionBreakerState, error) {
	return a.setPartitionBreaker(ctx, kind, key, false)
}

func (a *Admin) setPartitionBreaker(ctx context.Context, kind, key string, open bool) (*PartitionBreakerState, error) {
	verb := store.BreakerVerb(open)
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("%s partition breaker: %w", verb, err)
	}
	if err := checkKind(kind); err != nil {
		return nil, fmt.Errorf("%s partition breaker: %w", verb, err)
	}
	if err := store.CheckText(key, store.MaxPartitionKeyLength); err != nil {
		return nil, fmt.Errorf("%s partition breaker: %w: partition key: %w", verb, ErrInvalidOption, err)
	}
	ps, err := partitionBreakerStoreOf(a.store)
	if err != nil {
		return nil, fmt.Errorf("%s partition breaker: %w", verb, err)
	}
	res, err := ps.SetPartitionBreaker(ctx, kind, key, open)
	if err != nil {
		return nil, fmt.Errorf("%s breaker of %q partition %q: %w", verb, kind, key, err)
	}
	a.audit("partition breaker "+verb+"ed by hand", zap.String(fieldKind, kind), zap.String("partition_key", key),
		zap.Bool("changed", res.Transition != nil))
	if a.sched != nil && res.Transition != nil {
		a.sched.breakerChanged(*res.Transition)
	}
	if r := a.runtime(); r != nil && !open {
		r.wake()
	}
	return &res.State, nil
}
