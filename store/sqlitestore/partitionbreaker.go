package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/axsched/ax/store"
)

// Partition breakers (store.PartitionBreakerStore): one row of
// flow_partition_breakers per failing partition (migration 0006), read
// once per transaction (wtx.pbreakers) and written back by saveFlows;
// a breaker left closed with no failure counted is deleted, so the table
// grows with the failing partitions only. Claims apply them in partHeld
// and start probes in take; Finish feeds them (observePartBreaker), in a
// caller's transaction too (CompleteTx).

var _ store.PartitionBreakerStore = (*Store)(nil)

// partKey names one partition of a kind.
type partKey struct{ kind, key string }

// partBreakerRow is a partition's breaker as the transaction read it
// (b nil: none kept, closed) and whether it changed.
type partBreakerRow struct {
	b     *store.BreakerStatus
	dirty bool
}

// partBreakerRowOf returns the cached row of kind's partition key,
// reading it on first use.
func (w *wtx) partBreakerRowOf(kind, key string) (*partBreakerRow, error) {
	id := partKey{kind, key}
	if row, ok := w.pbreakers[id]; ok {
		return row, nil
	}
	row := &partBreakerRow{}
	var raw string
	err := w.queryRow(qPartBreakerGet, kind, key).Scan(&raw)
	switch {
	case isNoRows(err):
	case err != nil:
		return nil, fmt.Errorf("read breaker of %q partition %q: %w", kind, key, err)
	default:
		row.b = &store.BreakerStatus{}
		if err := json.Unmarshal([]byte(raw), row.b); err != nil {
			return nil, fmt.Errorf("decode breaker of %q partition %q: %w", kind, key, err)
		}
	}
	if w.pbreakers == nil {
		w.pbreakers = make(map[partKey]*partBreakerRow)
	}
	w.pbreakers[id] = row
	return row, nil
}

// partBreaker returns the breaker of kind's partition key (nil: closed,
// none kept).
func (w *wtx) partBreaker(kind, key string) (*store.BreakerStatus, error) {
	row, err := w.partBreakerRowOf(kind, key)
	if err != nil {
		return nil, err
	}
	return row.b, nil
}

// probePartBreaker moves the breaker of kind's partition key to
// half_open when a claim just took its probe, and returns the transition.
func (w *wtx) probePartBreaker(kind, key string) *store.BreakerTransition {
	row := w.pbreakers[partKey{kind, key}] // read by partHeld before the take
	if row == nil || row.b == nil {
		return nil
	}
	t := row.b.Probe(kind, w.now).ForPartition(key)
	if t != nil {
		row.dirty = true
	}
	return t
}

// observePartBreaker feeds the breaker of kind's partition key the
// outcome out of an attempt, and returns the transition it made, if any.
func (w *wtx) observePartBreaker(kind, key string, out store.Outcome) (*store.BreakerTransition, error) {
	f, err := w.flowOf(kind)
	if err != nil || f == nil || f.cfg.PartitionBreaker.IsZero() {
		return nil, err
	}
	var failed bool
	switch out {
	case store.OutcomeSucceeded:
	case store.OutcomeRetry, store.OutcomeDead:
		failed = true
	default:
		return nil, nil
	}
	row, err := w.partBreakerRowOf(kind, key)
	if err != nil {
		return nil, err
	}
	if row.b == nil {
		if !failed {
			return nil, nil // closed, nothing counted: nothing to reset
		}
		row.b = &store.BreakerStatus{}
	}
	row.dirty = true
	return row.b.Observe(&f.cfg.PartitionBreaker, kind, failed, w.now).ForPartition(key), nil
}

// savePartBreakers writes the partition breakers the transaction
// changed, deleting those it may forget.
func (w *wtx) savePartBreakers() error {
	for id, row := range w.pbreakers {
		if !row.dirty {
			continue
		}
		if row.b == nil || row.b.Forgettable() {
			if _, err := w.exec(qPartBreakerDel, id.kind, id.key); err != nil {
				return fmt.Errorf("forget breaker of %q partition %q: %w", id.kind, id.key, err)
			}
			row.b = nil
		} else {
			raw, err := json.Marshal(row.b)
			if err != nil {
				return err
			}
			if _, err := w.exec(qPartBreakerPut, id.kind, id.key, string(raw)); err != nil {
				return fmt.Errorf("store breaker of %q partition %q: %w", id.kind, id.key, err)
			}
		}
		row.dirty = false
	}
	return nil
}

// dropPartBreakers deletes kind's partition breakers (its settings lost
// them, or changed their partition source).
func (w *wtx) dropPartBreakers(kind string) error {
	for id := range w.pbreakers {
		if id.kind == kind {
			delete(w.pbreakers, id)
		}
	}
	if _, err := w.exec(qPartBreakersDel, kind); err != nil {
		return fmt.Errorf("delete partition breakers: %w", err)
	}
	return nil
}

// PartitionBreakers returns the breakers kept for kind's partitions
// (open, half_open, or closed with failures counted), ordered by key, with
// their partitions' running jobs; see store.PartitionBreakerStore. A kind
// without a partition breaker fails with an error wrapping
// store.ErrNotFound.
func (s *Store) PartitionBreakers(ctx context.Context, kind string) ([]store.PartitionBreakerState, error) {
	if err := store.CheckPartitionBreaker("partition breakers", kind, ""); err != nil {
		return nil, err
	}
	var out []store.PartitionBreakerState
	err := s.read(ctx, true, func(r *rtx) error {
		out = []store.PartitionBreakerState{}
		var (
			cfg, by, breaker string
			at, tat          int64
		)
		err := r.queryRow(qFlowGet, kind).Scan(&cfg, &by, &at, &breaker, &tat)
		if err != nil && !isNoRows(err) {
			return err
		}
		var f *flowRow
		if err == nil {
			if f, err = decodeFlow(cfg, by, at, breaker, tat); err != nil {
				return err
			}
		}
		if f == nil || f.cfg.PartitionBreaker.IsZero() {
			return fmt.Errorf("%w: kind %q has no partition breaker", store.ErrNotFound, kind)
		}
		now := s.clock()
		rows, err := r.query(qPartBreakersAll, kind)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p := store.PartitionBreakerState{Kind: kind, Now: now}
			var raw string
			if err := rows.Scan(&p.PartitionKey, &raw, &p.Running); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(raw), &p.Breaker); err != nil {
				return fmt.Errorf("decode breaker of %q partition %q: %w", kind, p.PartitionKey, err)
			}
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("partition breakers of %q: %w", kind, err)
	}
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
	var res *store.SetPartitionBreakerResult
	err := s.write(ctx, func(w *wtx) error {
		f, err := w.flowOf(kind)
		if err != nil {
			return err
		}
		if f == nil || f.cfg.PartitionBreaker.IsZero() {
			return fmt.Errorf("%w: kind %q has no partition breaker", store.ErrNotFound, kind)
		}
		row, err := w.partBreakerRowOf(kind, key)
		if err != nil {
			return err
		}
		if row.b == nil {
			row.b = &store.BreakerStatus{}
		}
		res = &store.SetPartitionBreakerResult{Transition: row.b.Set(&f.cfg.PartitionBreaker, kind, open, w.now).ForPartition(key)}
		if res.Transition != nil {
			row.dirty = true
			if !open {
				w.notify(kind, w.now)
			}
		}
		res.State = store.PartitionBreakerState{Kind: kind, PartitionKey: key, Breaker: *row.b, Now: w.now}
		if res.State.Breaker.State == "" {
			res.State.Breaker.State = store.BreakerClosed
		}
		if err := w.queryRow(qPartRunning, kind, key).Scan(&res.State.Running); err != nil {
			return err
		}
		return w.saveFlows()
	})
	if err != nil {
		return nil, fmt.Errorf("%s of %q: %w", what, kind, err)
	}
	return res, nil
}
