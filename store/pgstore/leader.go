package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.LeaderReader = (*Store)(nil)

// readLeaderSQL reads a leadership lease against the database's clock. A
// released lease keeps its row (empty holder, term kept), and an expired one
// keeps its last holder: both read as not held.
const readLeaderSQL = `SELECT holder, term, expires_at, holder <> '' AND expires_at > now() FROM {leader} WHERE name = $1`

// Leader returns the named lease as it is now, compared with the
// database's now(), without taking part in the election; see
// store.LeaderReader. A lease never held reads as the zero Leadership; a
// released or expired one as not held, with its latest term. A name that
// is not a storable text of at most store.MaxKindLength bytes fails with
// an error wrapping store.ErrInvalidParams.
func (s *Store) Leader(ctx context.Context, name string) (*store.Leadership, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckText(name, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("pgstore: read leader: %w: name: %w", store.ErrInvalidParams, err)
	}
	var (
		l       store.Leadership
		holder  string
		expires time.Time
	)
	err := s.pool.QueryRow(ctx, s.clusterSQL(readLeaderSQL), name).Scan(&holder, &l.Term, &expires, &l.Held)
	if errors.Is(err, pgx.ErrNoRows) {
		return &store.Leadership{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: read leader %q: %w", name, invalidData(err))
	}
	if l.Held {
		l.Holder, l.ExpiresAt = holder, expires
	}
	return &l, nil
}
