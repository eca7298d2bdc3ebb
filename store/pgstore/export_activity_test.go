package pgstore

// ActivitySQL returns Activity's statement on the Store's schema, for the
// plan test.
func (s *Store) ActivitySQL() string {
	return replaceTable(replaceTable(activitySQL, "{jobs_history}", s.schema, "jobs_history"), "{jobs}", s.schema, "jobs")
}
