package memstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"

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
