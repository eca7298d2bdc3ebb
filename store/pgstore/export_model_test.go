package pgstore

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// LeftBehind returns the jobs still in the hot table that an archive pass
// would move but that finished before where the next recent pass starts
// walking: no pass but a sweep or a Store's first one reaches them again.
// Right after a pass that drained, it is empty unless a change put an old
// finished job back in the hot table without changing it (issue 23,
// defect 4). Before the first pass it returns nothing.
func (s *Store) LeftBehind(ctx context.Context) ([]uuid.UUID, error) {
	s.history.mu.Lock()
	from := s.history.from
	s.history.mu.Unlock()
	if from.IsZero() {
		return nil, nil
	}
	rows, _ := s.pool.Query(ctx, s.sql(`SELECT id FROM {jobs}
WHERE (`+archivableSQL+`) AND finished_at < $1
  AND (unique_period = 0 OR unique_key IS NULL OR state = 'cancelled'
       OR finished_at < now() - unique_period * interval '1 second')
ORDER BY id`), from)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	return idsOf(ids), err
}

// ArchiveFrom returns where the next recent archive pass starts walking
// (zero before the first pass), for messages.
func (s *Store) ArchiveFrom() time.Time {
	s.history.mu.Lock()
	defer s.history.mu.Unlock()
	return s.history.from
}

// HotFinished returns the jobs in a final state that are in the hot table
// (jobs), not in the history.
func (s *Store) HotFinished(ctx context.Context) ([]uuid.UUID, error) {
	rows, _ := s.pool.Query(ctx, s.sql(`SELECT id FROM {jobs} WHERE state IN `+finalSQL+` ORDER BY id`))
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	return idsOf(ids), err
}

// HotIDs returns the jobs in the hot table (jobs), in every state.
func (s *Store) HotIDs(ctx context.Context) ([]uuid.UUID, error) {
	rows, _ := s.pool.Query(ctx, s.sql(`SELECT id FROM {jobs} ORDER BY id`))
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	return idsOf(ids), err
}
