package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Compile-time checks of the operator interfaces.
var (
	_ store.JobInspector       = (*Store)(nil)
	_ store.BulkController     = (*Store)(nil)
	_ store.KindPauser         = (*Store)(nil)
	_ store.PeriodicController = (*Store)(nil)
	_ store.LeaderReader       = (*Store)(nil)
	_ store.DueInspector       = (*Store)(nil)
)

// ListJobs returns copies of the jobs matching params.Filter (with the
// reference semantics of store.JobFilter.Matches) that follow the cursor
// params.After in params.Order, at most params.Limit of them; see
// store.JobInspector. JobPage.Next is the last job's ID when another
// matching job follows, zero otherwise. With params.PreviewBytes the
// copies are in brief (store.BriefRecord), so a page copies a bounded part
// of each job. Invalid params
// (ListJobsParams.Validate) fail with an error wrapping
// store.ErrInvalidParams.
//
// A filter on IDs reads only those jobs; any other filter walks the jobs
// in ID order from the cursor and skips the ones it rejects, so a
// selective filter over a large store reads many jobs (about 15 ms per
// 100,000 on a shared 2-core machine; see BenchmarkListFiltered).
func (s *Store) ListJobs(ctx context.Context, params *store.ListJobsParams) (*store.JobPage, error) {
	if params == nil {
		return nil, fmt.Errorf("list jobs: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer s.mu.Unlock()
	page := &store.JobPage{}
	f := &params.Filter
	s.walk(f, params.Order == store.NewestFirst, params.After, func(j *job) bool {
		if len(page.Jobs) == params.Limit {
			// A further match exists: the page is not the last.
			page.Next = page.Jobs[len(page.Jobs)-1].ID
			return false
		}
		if params.PreviewBytes > 0 {
			// Copy only what the brief keeps, not the whole payload.
			page.Jobs = append(page.Jobs, store.BriefRecord(&j.rec, params.PreviewBytes))
		} else {
			page.Jobs = append(page.Jobs, copyRecord(&j.rec))
		}
		return true
	})
	return page, nil
}

// walk calls fn with the jobs matching f, in ID order (descending when
// newestFirst) strictly after the cursor after (when not zero), until fn
// returns false. s.mu is held.
func (s *Store) walk(f *store.JobFilter, newestFirst bool, after uuid.UUID, fn func(*job) bool) {
	var ids []uuid.UUID
	if len(f.IDs) > 0 {
		// Only these jobs can match: read them, not the whole store.
		ids = slices.Clone(f.IDs)
		slices.SortFunc(ids, compareIDs)
		ids = slices.Compact(ids)
	} else {
		ids = s.ids.sorted(s.jobs)
	}
	if newestFirst {
		i := len(ids) - 1
		if after != uuid.Nil {
			i = sort.Search(len(ids), func(i int) bool { return !idLess(ids[i], after) }) - 1
		}
		for ; i >= 0; i-- {
			if j := s.jobs[ids[i]]; j != nil && f.Matches(&j.rec) && !fn(j) {
				return
			}
		}
		return
	}
	i := 0
	if after != uuid.Nil {
		i = sort.Search(len(ids), func(i int) bool { return idLess(after, ids[i]) })
	}
	for ; i < len(ids); i++ {
		if j := s.jobs[ids[i]]; j != nil && f.Matches(&j.rec) && !fn(j) {
			return
		}
	}
}

// compareIDs orders IDs by their bytes, as idLess does.
func compareIDs(a, b uuid.UUID) int {
	switch {
	case idLess(a, b):
		return -1
	case idLess(b, a):
		return 1
	}
	return 0
}

// CountMatching returns how many jobs match f, exactly; see
// store.JobInspector. A filter on kinds and states alone (or none) is
// answered from the counters every operation keeps, without reading the
// jobs; any other reads every job (or only the listed IDs). An invalid
// filter (JobFilter.Validate) fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) CountMatching(ctx context.Context, f *store.JobFilter) (int64, error) {
	if f == nil {
		return 0, fmt.Errorf("count jobs: %w: nil filter", store.ErrInvalidParams)
	}
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	defer s.mu.Unlock()
	if kindsAndStatesOnly(f) {
		return s.countByKindAndState(f), nil
	}
	var n int64
	if len(f.IDs) > 0 {
		s.walk(f, false, uuid.Nil, func(*job) bool { n++; return true })
		return n, nil
	}
	for _, j := range s.jobs {
		if f.Matches(&j.rec) {
			n++
		}
	}
	return n, nil
}

// kindsAndStatesOnly reports whether f filters on nothing but kinds and
// states.
func kindsAndStatesOnly(f *store.JobFilter) bool {
	g := *f
	g.Kinds, g.States = nil, nil
	return g.IsZero()
}

// countByKindAndState sums the maintained counters of f's kinds and
// states. s.mu is held.
func (s *Store) countByKindAndState(f *store.JobFilter) int64 {
	states := f.States
	if len(states) == 0 {
		states = store.States
	}
	var want [numStates]bool
	for _, st := range states {
		want[stateIndex(st)] = true
	}
	sum := func(k *kindIndex) int64 {
		var n int64
		for i, c := range k.counts {
			if want[i] {
				n += c
			}
		}
		return n
	}
	var n int64
	if len(f.Kinds) == 0 {
		for _, k := range s.kinds {
			n += sum(k)
		}
		return n
	}
	seen := make(map[string]bool, len(f.Kinds))
	for _, name := range f.Kinds {
		if k := s.kinds[name]; k != nil && !seen[name] {
			seen[name] = true
			n += sum(k)
		}
	}
	return n
}

// OldestDue returns, per kind, the earliest run_at of its scheduled and
// retrying jobs due at the store's now; see store.DueInspector. It reads
// the head of each kind's per-partition, per-priority heaps: O(kinds ·
// partitions), whatever the backlog. Of a sequence (InsertParams.SequenceKey)
// only the first job counts, and only while none of it runs.
func (s *Store) OldestDue(ctx context.Context) (*store.DueReport, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("oldest due jobs: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	rep := &store.DueReport{Now: now}
	for _, k := range s.kinds {
		var oldest *job
		for _, p := range k.partList {
			for pr := range p.due {
				if j := p.due[pr].top(); j != nil && !j.rec.RunAt.After(now) && (oldest == nil || j.rec.RunAt.Before(oldest.rec.RunAt)) {
					oldest = j
				}
			}
		}
		if oldest != nil {
			rep.Kinds = append(rep.Kinds, store.KindDue{Kind: k.name, OldestRunAt: oldest.rec.RunAt})
		}
	}
	slices.SortFunc(rep.Kinds, func(a, b store.KindDue) int {
		switch {
		case a.Kind < b.Kind:
			return -1
		case a.Kind > b.Kind:
			return 1
		}
		return 0
	})
	return rep, nil
}
