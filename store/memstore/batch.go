package memstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// batch is a batch's bookkeeping: the last known state of each child (kept
// after a child is pruned), the number not yet final, and the completion
// job to insert when that number reaches zero.
type batch struct {
	id          uuid.UUID
	children    map[uuid.UUID]store.State
	order       []uuid.UUID // children by ID, for paging
	pending     int
	completion  store.InsertParams
	completed   bool
	reopened    bool // completed once, then a child was retried
	createdAt   time.Time
	completedAt time.Time
}

// InsertBatch inserts the batch and its children atomically, as
// store.BatchStore documents: every row is checked first; children whose
// unique key is held are duplicates, left out of the batch. A batch whose
// children are all duplicates is not stored (no record, no completion).
func (s *Store) InsertBatch(ctx context.Context, params *store.BatchParams) (*store.BatchResult, error) {
	if params == nil {
		return nil, fmt.Errorf("insert batch: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("insert batch %s: %w", params.ID, err)
	}
	fresh, err := prepare(params.Children)
	if err != nil {
		return nil, fmt.Errorf("insert batch %s: %w", params.ID, err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("insert batch %s: %w", params.ID, err)
	}
	if s.batches[params.ID] != nil || s.jobs[params.Completion.ID] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("insert batch %s: %w: batch or completion ID already exists", params.ID, store.ErrInvalidParams)
	}
	var ns notes
	results, err := s.insertLocked(params.Children, fresh, params.ID, &ns, true)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("insert batch %s: %w", params.ID, err)
	}
	now := s.clock()
	if !slices.ContainsFunc(results, func(r store.InsertResult) bool { return !r.Duplicate }) {
		s.mu.Unlock()
		return &store.BatchResult{Children: results}, nil // no child to wait for: no batch
	}
	comp := params.Completion
	comp.Payload = bytes.Clone(comp.Payload)
	comp.Metadata = maps.Clone(comp.Metadata)
	b := &batch{id: params.ID, children: make(map[uuid.UUID]store.State), completion: comp, createdAt: now}
	for _, r := range results {
		if !r.Duplicate {
			b.children[r.ID] = store.StateScheduled
			b.order = append(b.order, r.ID)
			b.pending++
		}
	}
	slices.SortFunc(b.order, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	s.batches[b.id] = b
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return &store.BatchResult{Children: results}, nil
}

// Batch returns the batch's progress, or an error wrapping
// store.ErrNotFound.
func (s *Store) Batch(ctx context.Context, id uuid.UUID) (*store.BatchRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	defer s.mu.Unlock()
	b := s.batches[id]
	if b == nil {
		return nil, fmt.Errorf("batch %s: %w", id, store.ErrNotFound)
	}
	rec := &store.BatchRecord{ID: id, Total: len(b.children), Completion: b.completion.ID, Completed: b.completed,
		CreatedAt: b.createdAt, CompletedAt: b.completedAt}
	for cid, st := range b.children {
		if j := s.jobs[cid]; j != nil {
			st = j.rec.State
		}
		switch st {
		case store.StateSucceeded:
			rec.Succeeded++
		case store.StateDead:
			rec.Dead++
		case store.StateCancelled:
			rec.Cancelled++
		default:
			rec.Pending++
		}
	}
	return rec, nil
}

// BatchChildren returns copies of the batch's children after the cursor,
// by ID; pruned children are left out.
func (s *Store) BatchChildren(ctx context.Context, id, after uuid.UUID, limit int) ([]*store.JobRecord, error) {
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("batch %s children: %w: limit %d not in [1, %d]", id, store.ErrInvalidParams, limit, store.MaxListLimit)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("batch %s children: %w", id, err)
	}
	defer s.mu.Unlock()
	b := s.batches[id]
	if b == nil {
		return nil, fmt.Errorf("batch %s children: %w", id, store.ErrNotFound)
	}
	i, _ := slices.BinarySearchFunc(b.order, after, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	if i < len(b.order) && b.order[i] == after {
		i++
	}
	var out []*store.JobRecord
	for ; i < len(b.order) && len(out) < limit; i++ {
		if j := s.jobs[b.order[i]]; j != nil {
			out = append(out, copyRecord(&j.rec))
		}
	}
	return out, nil
}

// CancelBatch cancels the batch's children as OpCancel would, and returns
// how many changed.
func (s *Store) CancelBatch(ctx context.Context, id uuid.UUID) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	b := s.batches[id]
	if b == nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("cancel batch %s: %w", id, store.ErrNotFound)
	}
	n := 0
	var ns notes
	for _, cid := range b.order {
		j := s.jobs[cid]
		if j == nil || j.rec.State.Final() {
			continue
		}
		changed, err := s.control(j, store.OpCancel, &ns)
		if err == nil && changed {
			n++
		}
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return n, nil
}
