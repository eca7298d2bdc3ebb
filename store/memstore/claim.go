package memstore

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Claim moves up to params.Limit due jobs of the requested kinds to running,
// as store.Store.Claim documents: strictly by priority, then run_at, then
// ID, taking at most each kind's limit. A kind listed twice keeps its first
// limit. Each claimed job gets Owner, a fresh random LeaseToken,
// LeaseExpiresAt = now + LeaseDuration, AttemptedAt = now, Attempt + 1,
// Fence + 1 and CancelRequested and PauseRequested false. ClaimResult.NextRunAt is the earliest run_at of the
// claimable jobs of the requested kinds left behind (zero when none).
// Invalid params (ClaimParams.Validate, or a kind that is not a storable
// text) fail with an error wrapping store.ErrInvalidParams.
//
// The cost is O(claimed · (kinds + log n)): only the heads of the per-kind,
// per-priority heaps are read.
func (s *Store) Claim(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if params == nil {
		return nil, fmt.Errorf("claim jobs: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	for _, k := range params.Kinds {
		if err := checkTexts(k.Kind); err != nil {
			return nil, fmt.Errorf("claim jobs: kind: %w", err)
		}
	}
	type want struct {
		k    *kindIndex
		left int
	}
	var buf [8]want
	wants := buf[:0]

	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	res := &store.ClaimResult{Now: now}

next:
	for _, kl := range params.Kinds {
		k := s.kinds[kl.Kind]
		if k == nil {
			continue
		}
		for _, w := range wants {
			if w.k == k {
				continue next
			}
		}
		wants = append(wants, want{k: k, left: kl.Limit})
	}

	left := params.Limit
	expires := stamp(now.Add(params.LeaseDuration))
	for pr := range priorityLevels {
		for left > 0 {
			best, bi := (*job)(nil), -1
			for i, w := range wants {
				if w.left == 0 {
					continue
				}
				j := w.k.due[pr].top()
				if j == nil || j.rec.RunAt.After(now) {
					continue
				}
				if best == nil || claimsBefore(j, best) {
					best, bi = j, i
				}
			}
			if best == nil {
				break
			}
			wants[bi].left--
			left--

			s.unindex(best)
			r := &best.rec
			r.State = store.StateRunning
			r.Owner = params.Owner
			r.LeaseToken = uuid.New()
			r.LeaseExpiresAt = expires
			r.AttemptedAt = now
			r.Attempt++
			r.Fence++
			r.CancelRequested = false
			r.PauseRequested = false
			s.index(best)
			res.Jobs = append(res.Jobs, copyRecord(r))
		}
	}

	var next *job
	for _, w := range wants {
		for pr := range w.k.due {
			if j := w.k.due[pr].top(); j != nil && (next == nil || j.rec.RunAt.Before(next.rec.RunAt)) {
				next = j
			}
		}
	}
	if next != nil {
		res.NextRunAt = next.rec.RunAt
	}
	return res, nil
}

// claimsBefore reports whether a is claimed before b at the same priority.
func claimsBefore(a, b *job) bool {
	if !a.rec.RunAt.Equal(b.rec.RunAt) {
		return a.rec.RunAt.Before(b.rec.RunAt)
	}
	return idLess(a.rec.ID, b.rec.ID)
}
