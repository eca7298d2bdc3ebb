package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// Claim claims due jobs as store.Store requires, in one statement (see the
// package documentation for its shape). Kinds listed twice count once, with
// the smaller limit. An empty Kinds claims nothing. Due-ness, lease expiry
// and ClaimResult.Now come from the database's now(). Each claimed job's
// Fence grows by one. Params that ClaimParams.Validate refuses, or kinds
// PostgreSQL cannot take as text, fail with an error wrapping
// store.ErrInvalidParams.
func (s *Store) Claim(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.flowActive(ctx, params) { // flow-controlled kinds, sequences or aging: claimflow.go
		return s.claimFlow(ctx, params)
	}
	if params == nil {
		return nil, fmt.Errorf("pgstore: claim: nil params: %w", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	kinds := make([]string, 0, len(params.Kinds))
	limits := make([]int32, 0, len(params.Kinds))
	seen := make(map[string]int, len(params.Kinds))
	for _, k := range params.Kinds {
		lim := int32(min(k.Limit, params.Limit))
		if i, ok := seen[k.Kind]; ok {
			limits[i] = min(limits[i], lim)
			continue
		}
		seen[k.Kind] = len(kinds)
		kinds = append(kinds, k.Kind)
		limits = append(limits, lim)
	}
	res := &store.ClaimResult{Jobs: []*store.JobRecord{}}
	if len(kinds) == 0 {
		now, err := s.Now(ctx)
		res.Now = now
		return res, err
	}
	rows, err := s.pool.Query(ctx, s.q.claim, kinds, limits, int32(min(params.Limit, 1<<30)), params.Owner, micros(params.LeaseDuration), micros(params.AgeAfter))
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			next *time.Time
			js   jobScan
		)
		dest := append([]any{&res.Now, &next}, js.dest()...)
		if rows.RawValues()[2] == nil { // no job claimed: only now and next
			clear(dest[2:])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("pgstore: claim: %w", err)
		}
		if next != nil {
			res.NextRunAt = *next
		}
		if dest[2] == nil {
			continue
		}
		j, err := js.record()
		if err != nil {
			return nil, fmt.Errorf("pgstore: claim: %w", err)
		}
		res.Jobs = append(res.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	return res, nil
}
