package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Bulk applies params.Op to at most params.Limit jobs matching
// params.Filter to which it applies, oldest (lowest ID) first, in one
// atomic operation, and returns how many it changed; see
// store.BulkController and the BulkOp constants for which jobs each
// operation changes and how (the transitions are Control's). Jobs made
// due notify subscribers, once per kind. Invalid params
// (BulkParams.Validate) fail with an error wrapping store.ErrInvalidParams
// and change nothing.
//
// Like ListJobs, Bulk walks the jobs in ID order and skips the ones the
// filter rejects; jobs it changed no longer match a filter on their old
// state, so a caller draining a large selection walks past them again on
// each call.
func (s *Store) Bulk(ctx context.Context, params *store.BulkParams) (int, error) {
	if params == nil {
		return 0, fmt.Errorf("bulk: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("bulk %s: %w", params.Op, err)
	}
	if err := s.lock(ctx); err != nil {
		return 0, fmt.Errorf("bulk %s: %w", params.Op, err)
	}
	now := s.clock()
	var (
		ns      notes
		notify  = s.subs.any()
		changed int
		deleted []*job
	)
	s.walk(&params.Filter, false, uuid.Nil, func(j *job) bool {
		switch params.Op {
		case store.BulkRunNow:
			if !s.bulkRunNow(j, now, &ns) {
				return true
			}
			if notify {
				ns.add(j.rec.Kind, j.rec.RunAt)
			}
		case store.BulkCancel:
			if !s.bulkCancel(j, &ns) {
				return true
			}
		case store.BulkDelete:
			if !j.rec.State.Final() {
				return true
			}
			// Deleted after the walk: the walk reads the ID index.
			deleted = append(deleted, j)
		}
		changed++
		return changed < params.Limit
	})
	for _, j := range deleted {
		s.unindex(j)
		delete(s.jobs, j.rec.ID)
		s.ids.removed++
	}
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return changed, nil
}

// bulkRunNow makes j due now if BulkRunNow applies to it, and reports
// whether it changed j.
func (s *Store) bulkRunNow(j *job, now time.Time, ns *notes) bool {
	st := j.rec.State
	switch {
	case st.Claimable() && !j.rec.RunAt.After(now):
		return false // already due
	case st.Claimable(), st == store.StatePaused, st == store.StateDead, st == store.StateCancelled:
		// Control refuses a dead or cancelled job whose key another job
		// holds meanwhile: that job is left alone.
		changed, err := s.control(j, store.OpRunNow, ns)
		return err == nil && changed
	}
	return false
}

// bulkCancel cancels j if BulkCancel applies to it, and reports whether
// it changed j.
func (s *Store) bulkCancel(j *job, ns *notes) bool {
	st := j.rec.State
	if st.Claimable() || st == store.StatePaused || (st == store.StateRunning && !j.rec.CancelRequested) {
		changed, err := s.control(j, store.OpCancel, ns)
		return err == nil && changed
	}
	return false
}
