package memstore

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
)

var _ store.DeadGrouper = (*Store)(nil)

// DeadGroups counts the dead jobs params selects by kind and
// store.DeadErrorLine (store.GroupDead); see store.DeadGrouper. It reads
// every job.
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
	recs := make([]*store.JobRecord, 0, len(s.jobs))
	for _, j := range s.jobs {
		recs = append(recs, &j.rec)
	}
	return store.GroupDead(recs, params), nil
}
