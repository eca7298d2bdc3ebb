package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// List returns copies of the jobs matching params, ordered by ID (byte
// order, which for UUIDv7 is creation order): jobs of params.Kind when it is
// not empty, in one of params.States when it is not empty, with an ID after
// params.After, at most params.Limit of them. A nil params, a Limit < 1, an
// unknown state or a kind that is not a storable text (store.CheckText)
// fails with an error wrapping store.ErrInvalidParams.
//
// List walks jobs in ID order from params.After and skips the ones the
// filters reject, so a selective filter over a large store reads many jobs.
func (s *Store) List(ctx context.Context, params *store.ListParams) ([]*store.JobRecord, error) {
	if params == nil {
		return nil, fmt.Errorf("list jobs: %w: nil params", store.ErrInvalidParams)
	}
	if params.Limit < 1 {
		return nil, fmt.Errorf("list jobs: %w: limit %d < 1", store.ErrInvalidParams, params.Limit)
	}
	if err := checkTexts(params.Kind); err != nil {
		return nil, fmt.Errorf("list jobs: kind: %w", err)
	}
	var want [numStates]bool
	for _, st := range params.States {
		if !st.Valid() {
			return nil, fmt.Errorf("list jobs: %w: unknown state %q", store.ErrInvalidParams, st)
		}
		want[stateIndex(st)] = true
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer s.mu.Unlock()
	ids := s.ids.sorted(s.jobs)
	i := sort.Search(len(ids), func(i int) bool { return idLess(params.After, ids[i]) })
	var out []*store.JobRecord
	for ; i < len(ids) && len(out) < params.Limit; i++ {
		r := &s.jobs[ids[i]].rec
		if params.Kind != "" && r.Kind != params.Kind {
			continue
		}
		if len(params.States) > 0 && !want[stateIndex(r.State)] {
			continue
		}
		out = append(out, copyRecord(r))
	}
	return out, nil
}

// idIndex keeps every job's ID for List. IDs are appended on insert (UUIDv7
// IDs mostly arrive in order) and deletions are only counted; sorted puts
// the slice in order and drops deleted IDs when List needs it.
type idIndex struct {
	ids      []uuid.UUID
	unsorted bool // an ID was appended out of order
	removed  int  // IDs deleted since the last sorted call
}

func (x *idIndex) add(id uuid.UUID) {
	if n := len(x.ids); n > 0 && !idLess(x.ids[n-1], id) {
		x.unsorted = true
	}
	x.ids = append(x.ids, id)
}

// sorted returns the IDs of the jobs in jobs, in order, without duplicates.
func (x *idIndex) sorted(jobs map[uuid.UUID]*job) []uuid.UUID {
	if x.removed > 0 {
		x.ids = slices.DeleteFunc(x.ids, func(id uuid.UUID) bool { return jobs[id] == nil })
		x.removed = 0
	}
	if x.unsorted {
		slices.SortFunc(x.ids, func(a, b uuid.UUID) int {
			switch {
			case idLess(a, b):
				return -1
			case idLess(b, a):
				return 1
			}
			return 0
		})
		// An ID deleted and inserted again appears twice.
		x.ids = slices.Compact(x.ids)
		x.unsorted = false
	}
	return x.ids
}

// CountJobs returns the number of jobs of each kind in each state, leaving
// out zero counts, ordered by kind and then by the order of store.States.
// The counts are exact and kept up to date by every operation, so the call
// does not scan the jobs.
func (s *Store) CountJobs(ctx context.Context) ([]store.StateCount, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer s.mu.Unlock()
	var out []store.StateCount
	for _, k := range s.kinds {
		for _, st := range store.States {
			if c := k.counts[stateIndex(st)]; c != 0 {
				out = append(out, store.StateCount{Kind: k.name, State: st, Count: c})
			}
		}
	}
	slices.SortFunc(out, func(a, b store.StateCount) int {
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return cmp.Compare(stateIndex(a.State), stateIndex(b.State))
	})
	return out, nil
}
