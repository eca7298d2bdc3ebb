package pgstore

// ClaimSQL returns the claim statement, for the EXPLAIN test.
func (s *Store) ClaimSQL() string { return s.q.claim }
