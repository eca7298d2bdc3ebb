package pgstore

// InsertOneSQL returns the one-row insert, whose second half finds the
// holder of a held unique key, for the plan test.
func (s *Store) InsertOneSQL() string { return s.q.insertOne }

// HoldersSQL returns the lookup of the holders of many unique keys, for
// the plan test.
func (s *Store) HoldersSQL() string { return s.q.holders }
