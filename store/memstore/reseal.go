package memstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

var _ store.Resealer = (*Store)(nil)

// Reseal implements store.Resealer.
func (s *Store) Reseal(ctx context.Context, rows []store.ResealParams) ([]bool, error) {
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, fmt.Errorf("reseal row %d: %w", i, err)
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("reseal: %w", err)
	}
	defer s.mu.Unlock()
	ok := make([]bool, len(rows))
	for i, p := range rows {
		j := s.jobs[p.ID]
		if j == nil || !bytes.Equal(j.rec.Payload, p.OldPayload) || !bytes.Equal(j.rec.Result, p.OldResult) ||
			(j.rec.Result == nil) != (p.OldResult == nil) {
			continue
		}
		j.rec.Payload = bytes.Clone(p.Payload)
		if p.OldResult != nil {
			j.rec.Result = bytes.Clone(p.Result)
		}
		if p.Metadata != nil {
			j.rec.Metadata = maps.Clone(p.Metadata)
		}
		if p.FollowUps != nil {
			j.rec.FollowUps = cloneFollowUps(p.FollowUps)
		}
		ok[i] = true
	}
	return ok, nil
}

var _ store.BatchResealer = (*Store)(nil)

// PendingCompletions implements store.BatchResealer: copies of the
// completion templates of the batches not completed, by batch ID.
func (s *Store) PendingCompletions(ctx context.Context, after uuid.UUID, limit int) ([]store.PendingCompletion, error) {
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("pending completions: %w: limit %d not in [1, %d]", store.ErrInvalidParams, limit, store.MaxListLimit)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("pending completions: %w", err)
	}
	defer s.mu.Unlock()
	var ids []uuid.UUID
	for id, b := range s.batches {
		if !b.completed && bytes.Compare(id[:], after[:]) > 0 {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	out := []store.PendingCompletion{}
	for _, id := range ids[:min(limit, len(ids))] {
		b := s.batches[id]
		job := b.completion
		job.Payload = bytes.Clone(job.Payload)
		job.Metadata = maps.Clone(job.Metadata)
		job.FollowUps = cloneFollowUps(job.FollowUps)
		out = append(out, store.PendingCompletion{Batch: id, Job: job})
	}
	return out, nil
}

// ResealCompletions implements store.BatchResealer.
func (s *Store) ResealCompletions(ctx context.Context, rows []store.CompletionResealParams) ([]bool, error) {
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, fmt.Errorf("reseal completion row %d: %w", i, err)
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("reseal completions: %w", err)
	}
	defer s.mu.Unlock()
	ok := make([]bool, len(rows))
	for i := range rows {
		b := s.batches[rows[i].Batch]
		if b == nil || b.completed || !rows[i].Holds(&b.completion) {
			continue
		}
		rows[i].Apply(&b.completion)
		ok[i] = true
	}
	return ok, nil
}
