package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/axsched/ax/store"
)

var _ store.DeadGrouper = (*Store)(nil)

// DeadGroups counts the dead jobs params selects by kind and
// store.DeadErrorLine; see store.DeadGrouper. It reads every job.
func (s *Store) DeadGroups(ctx context.Context, params *store.DeadGroupsParams) (*store.DeadGroupReport, error) {
	if params == nil {
		return nil, fmt.Errorf("dead groups: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("dead groups: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("dead groups: %w", err)
	}
	defer s.mu.Unlock()
	type key struct{ kind, line string }
	byKey := map[key]*store.DeadGroup{}
	rep := &store.DeadGroupReport{}
	for _, j := range s.jobs {
		r := &j.rec
		if !params.Matches(r) {
			continue
		}
		k := key{r.Kind, store.DeadErrorLine(r)}
		g := byKey[k]
		if g == nil {
			g = &store.DeadGroup{Kind: k.kind, Error: k.line}
			byKey[k] = g
		}
		g.Count++
		rep.Jobs++
		if r.FinishedAt.After(g.Newest) {
			g.Newest = r.FinishedAt
		}
		if bytes.Compare(r.ID[:], g.Sample[:]) > 0 {
			g.Sample = r.ID
		}
	}
	for _, g := range byKey {
		rep.Groups = append(rep.Groups, *g)
	}
	slices.SortFunc(rep.Groups, store.CompareDeadGroups)
	rep.Total = len(rep.Groups)
	if len(rep.Groups) > params.Limit {
		rep.Groups = rep.Groups[:params.Limit]
	}
	return rep, nil
}
