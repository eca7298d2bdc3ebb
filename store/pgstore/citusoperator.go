package pgstore

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/axsched/ax/store"
)

// The operator's interfaces of the Citus store. Listings, counts and the
// oldest due job read every shard through the coordinator (Citus runs
// such a read as one task per shard, on custom plans); kind pauses and
// the leader live in plain tables of the coordinator.
var (
	_ store.JobInspector = (*CitusStore)(nil)
	_ store.KindPauser   = (*CitusStore)(nil)
	_ store.LeaderReader = (*CitusStore)(nil)
	_ store.DueInspector = (*CitusStore)(nil)
	_ store.DeadGrouper  = (*CitusStore)(nil)
)

// ListJobs lists the jobs of every shard; see store.JobInspector.
func (c *CitusStore) ListJobs(ctx context.Context, params *store.ListJobsParams) (*store.JobPage, error) {
	return c.s.ListJobs(ctx, params)
}

// CountMatching counts the matching jobs of every shard; see
// store.JobInspector.
func (c *CitusStore) CountMatching(ctx context.Context, f *store.JobFilter) (int64, error) {
	return c.s.CountMatching(ctx, f)
}

// SetKindPaused pauses or resumes a kind for every host; see
// store.KindPauser.
func (c *CitusStore) SetKindPaused(ctx context.Context, kind string, paused bool) (*store.KindState, error) {
	ks, err := c.s.SetKindPaused(ctx, kind, paused)
	if err == nil && !paused {
		for _, p := range c.placed {
			p.cursors.reset() // claims scan the kind's ranges whole again (cursor.go)
		}
	}
	return ks, err
}

// KindStates returns the paused kinds; see store.KindPauser.
func (c *CitusStore) KindStates(ctx context.Context) ([]store.KindState, error) {
	return c.s.KindStates(ctx)
}

// Leader returns the named leader lease; see store.LeaderReader.
func (c *CitusStore) Leader(ctx context.Context, name string) (*store.Leadership, error) {
	return c.s.Leader(ctx, name)
}

// OldestDue reports the longest-waiting due jobs of every shard, one
// statement on each (the kinds' skip scan is a recursive CTE, which Citus
// runs on one shard only); see store.DueInspector.
func (c *CitusStore) OldestDue(ctx context.Context) (*store.DueReport, error) {
	var rep *store.DueReport
	oldest := map[string]time.Time{}
	for _, p := range c.placed {
		r, err := p.OldestDue(ctx)
		if err != nil {
			return nil, err
		}
		if rep == nil {
			rep = r
		}
		for _, k := range r.Kinds {
			if t, ok := oldest[k.Kind]; !ok || k.OldestRunAt.Before(t) {
				oldest[k.Kind] = k.OldestRunAt
			}
		}
	}
	rep.Kinds = rep.Kinds[:0]
	for _, kind := range slices.Sorted(maps.Keys(oldest)) {
		rep.Kinds = append(rep.Kinds, store.KindDue{Kind: kind, OldestRunAt: oldest[kind]})
	}
	return rep, nil
}

// DeadGroups groups the dead jobs of every shard by kind and error line;
// see store.DeadGrouper.
func (c *CitusStore) DeadGroups(ctx context.Context, params *store.DeadGroupsParams) (*store.DeadGroupReport, error) {
	return c.s.DeadGroups(ctx, params)
}
