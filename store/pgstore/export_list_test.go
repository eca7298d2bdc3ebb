package pgstore

import (
	"context"

	"github.com/axsched/ax/store"
)

// ListSQL returns the listing statement of params and its arguments, for
// the plan test.
func (s *Store) ListSQL(params *store.ListJobsParams) (string, []any, error) {
	return s.listSQL(params)
}

// OldestDueSQL returns OldestDue's statement, for the plan test.
func (s *Store) OldestDueSQL() string {
	return s.sql(oldestDueSQL)
}

// BulkPickSQL returns the statement picking Bulk's candidates, its limit
// set, and its arguments, for the plan test.
func (s *Store) BulkPickSQL(params *store.BulkParams) (string, []any, error) {
	q, _, a, err := s.bulkPickSQL(params)
	if err == nil {
		a[len(a)-1] = params.Limit
	}
	return q, a, err
}

// BulkRunNowIsSetBased reports whether Bulk's run-now runs Control's
// statement on all its jobs at once (not once per job).
func (s *Store) BulkRunNowIsSetBased() bool { return s.runNowSetSQL() != "" }

// BulkRunNowEach is Bulk with run-now's per-job fallback.
func (s *Store) BulkRunNowEach(ctx context.Context, params *store.BulkParams) (int, error) {
	return s.bulk(ctx, params, func(op store.BulkOp) bulkApply {
		if op == store.BulkRunNow {
			return s.runNowEach
		}
		return s.bulkApplier(op)
	})
}

// DeadGroupsSQL returns DeadGroups' statement and its arguments, for the
// plan test.
func (s *Store) DeadGroupsSQL(params *store.DeadGroupsParams) (string, []any, error) {
	return s.deadGroupsSQL(params)
}
