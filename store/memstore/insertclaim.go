package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Compile-time check of the direct-start ability.
var _ store.InsertClaimer = (*Store)(nil)

// InsertClaimed inserts one job as Insert does and, when it may, claims it
// for claim.Owner in the same step, as store.InsertClaimer documents. The
// job is claimed when params.Claimable at the store's now, its kind's flow
// settings allow it (store.FlowConfig.InsertsClaimable), the kind has no
// sequences, and no other job of the kind, of any priority and partition,
// is due and claimable. A claimed job is made running as Claim makes it (Attempt 1,
// Fence + 1, a fresh random LeaseToken, LeaseExpiresAt = now +
// LeaseDuration, AttemptedAt = now) and notifies no one; its record is
// returned. Otherwise, or for a duplicate (the holder's ID and Duplicate =
// true), the record is nil and subscribers are notified as after Insert.
// A nil params, invalid params (InsertParams.Validate, a taken ID) or an
// invalid claim (InsertClaim.Validate) fail with an error wrapping
// store.ErrInvalidParams, and the pending bounds with a
// *store.PendingLimitError, as for Insert; they change nothing.
//
// The cost is that of a Claim of one job: O(partitions · 3 + log n).
func (s *Store) InsertClaimed(ctx context.Context, params *store.InsertParams, claim *store.InsertClaim) (store.InsertResult, *store.JobRecord, error) {
	if params == nil {
		return store.InsertResult{}, nil, fmt.Errorf("insert claimed job: %w: nil params", store.ErrInvalidParams)
	}
	if err := claim.Validate(); err != nil {
		return store.InsertResult{}, nil, fmt.Errorf("insert claimed job: %w", err)
	}
	ps := []store.InsertParams{*params}
	fresh, err := prepare(ps)
	if err != nil {
		return store.InsertResult{}, nil, fmt.Errorf("insert claimed job: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return store.InsertResult{}, nil, fmt.Errorf("insert claimed job: %w", err)
	}
	now := s.clock()
	// Decided before the insert, which puts the job itself in the due heaps.
	claims := params.Claimable(now) && s.startsAtInsert(params.Kind, now)
	var inserted, ns notes
	results, err := s.insertAt(ps, fresh, uuid.Nil, &inserted, true, now)
	var rec *store.JobRecord
	if err == nil && claims && !results[0].Duplicate {
		j := fresh[0]
		s.start(j, claim.Owner, now, stamp(now.Add(claim.LeaseDuration)))
		rec = copyRecord(&j.rec)
	} else {
		ns = inserted // no one else may take a claimed job: it notifies no one
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	if err != nil {
		return store.InsertResult{}, nil, fmt.Errorf("insert claimed job: %w", err)
	}
	s.subs.deliver(ns.list)
	return results[0], rec, nil
}

// startsAtInsert reports whether a job of kind inserted due at now may be
// claimed at once: its flow settings allow it (FlowConfig.InsertsClaimable),
// it has no sequences, and no job of the
// kind is due and claimable, which a claim would take first. Called with
// s.mu held.
func (s *Store) startsAtInsert(kind string, now time.Time) bool {
	k := s.kinds[kind]
	if k == nil {
		k = &kindIndex{name: kind} // no jobs yet: no sequences, nothing due
	}
	if len(k.seqs) > 0 {
		return false
	}
	if f := s.flows[kind]; f != nil && !f.cfg.InsertsClaimable() {
		return false
	}
	for _, p := range k.partList {
		for pr := range p.due {
			if j := p.due[pr].top(); j != nil && !j.rec.RunAt.After(now) {
				return false
			}
		}
	}
	return true
}
