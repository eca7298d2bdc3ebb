package pgstore

import (
	"strings"

	"github.com/axsched/ax/store"
)

// ListSQL returns the listing statement of params and its arguments, for
// the plan test.
func (s *Store) ListSQL(params *store.ListJobsParams) (string, []any, error) {
	return s.listSQL(params)
}

// OldestDueSQL returns OldestDue's statement, for the plan test.
func (s *Store) OldestDueSQL() string {
	return strings.ReplaceAll(oldestDueSQL, "{jobs}", s.jobsTable())
}
