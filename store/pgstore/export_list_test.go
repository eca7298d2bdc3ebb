package pgstore

import "github.com/axsched/ax/store"

// ListSQL returns the listing statement of params and its arguments, for
// the plan test.
func (s *Store) ListSQL(params *store.ListJobsParams) (string, []any, error) {
	return s.listSQL(params)
}
