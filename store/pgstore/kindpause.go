package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.KindPauser = (*Store)(nil)

const (
	// pauseKindSQL stores a pause; updated_at moves only when the kind
	// was not paused already, and then, in the same transaction (so only
	// on commit), it sends the empty-kind notification that makes every
	// host re-read the paused kinds at once rather than at its next
	// heartbeat.
	pauseKindSQL = `WITH up AS (INSERT INTO {kinds} AS k (kind, paused, updated_at) VALUES ($1, true, now())
ON CONFLICT (kind) DO UPDATE SET
	paused = true,
	updated_at = CASE WHEN k.paused THEN k.updated_at ELSE now() END
RETURNING k.paused, k.updated_at)
SELECT paused, updated_at,
	CASE WHEN updated_at = now() THEN pg_notify($2, json_build_object('kind', '', 'run_at', now())::text) END
FROM up`

	// resumeKindSQL resumes a paused kind by deleting its row (only a
	// pause is kept, so kinds paused and resumed leave nothing behind)
	// and, in the same transaction (so only on commit), sends the
	// empty-kind notification that makes every host re-read the paused
	// kinds and claim at once. It returns a row only when the kind was
	// paused; a row of a kind not paused (left by an older version) is
	// deleted quietly.
	resumeKindSQL = `WITH gone AS (DELETE FROM {kinds} WHERE kind = $1 RETURNING paused)
SELECT now(), pg_notify($2, json_build_object('kind', '', 'run_at', now())::text) FROM gone WHERE paused`
	kindStatesSQL = `SELECT kind, paused, updated_at FROM {kinds} WHERE paused ORDER BY kind COLLATE "C"`
)

// kindsSQL substitutes the schema-qualified kind_states table (migration
// 0005) for {kinds}.
func (s *Store) kindsSQL(q string) string {
	return strings.ReplaceAll(q, "{kinds}", pgx.Identifier{s.schema, "kind_states"}.Sanitize())
}

// SetKindPaused pauses (paused = true) or resumes kind and returns its
// state afterwards, in one statement; see store.KindPauser. Only paused
// kinds keep a row: a resume deletes it. Pausing a paused kind changes
// nothing (UpdatedAt included); resuming a kind that is not paused
// stores nothing and reads with a zero UpdatedAt. A pause or resume that
// changed the state sends an empty-kind notification on the Store's
// channel, delivered on commit, so that every host re-reads the paused
// kinds at once rather than at its next heartbeat. The store does not refuse claims of a paused kind: hosts
// leave paused kinds out of their claims. An empty kind, or one that is
// not a storable text of at most store.MaxKindLength bytes, fails with an
// error wrapping store.ErrInvalidParams.
func (s *Store) SetKindPaused(ctx context.Context, kind string, paused bool) (*store.KindState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	verb := "resume"
	if paused {
		verb = "pause"
	}
	if kind == "" {
		return nil, fmt.Errorf("pgstore: %s kind: %w: empty kind", verb, store.ErrInvalidParams)
	}
	if err := store.CheckText(kind, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("pgstore: %s kind: %w: %w", verb, store.ErrInvalidParams, err)
	}
	ks := &store.KindState{Kind: kind}
	var err error
	if paused {
		err = s.pool.QueryRow(ctx, s.kindsSQL(pauseKindSQL), kind, s.channel).Scan(&ks.Paused, &ks.UpdatedAt, nil)
	} else {
		err = s.pool.QueryRow(ctx, s.kindsSQL(resumeKindSQL), kind, s.channel).Scan(&ks.UpdatedAt, nil)
		s.cursors.reset() // claims scan the kind's ranges whole again (cursor.go)
		if errors.Is(err, pgx.ErrNoRows) {
			return ks, nil // not paused: no state
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s kind %q: %w", verb, kind, invalidData(err))
	}
	return ks, nil
}

// KindStates returns the paused kinds' states, ordered by kind in byte
// order; see
// store.KindPauser. Hosts call it at every heartbeat: it reads the small
// kind_states table.
func (s *Store) KindStates(ctx context.Context) ([]store.KindState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, s.kindsSQL(kindStatesSQL))
	out := []store.KindState{}
	var ks store.KindState
	_, err := pgx.ForEachRow(rows, []any{&ks.Kind, &ks.Paused, &ks.UpdatedAt}, func() error {
		out = append(out, ks)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: kind states: %w", err)
	}
	return out, nil
}
