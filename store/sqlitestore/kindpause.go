package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/axsched/ax/store"
)

// SetKindPaused pauses (paused = true) or resumes kind and returns its
// state afterwards; see store.KindPauser. Only paused kinds keep a row:
// a resume deletes it. Pausing a paused kind changes nothing (UpdatedAt
// included); resuming a kind that is not paused stores nothing and reads
// with a zero UpdatedAt. A resume
// that changed the state notifies subscribers with an empty-kind
// notification. An empty kind, or one that is not a storable text of at
// most store.MaxKindLength bytes, fails with an error wrapping
// store.ErrInvalidParams. The store does not refuse claims of a paused
// kind: schedulers leave paused kinds out of their claims.
func (s *Store) SetKindPaused(ctx context.Context, kind string, paused bool) (*store.KindState, error) {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	if kind == "" {
		return nil, fmt.Errorf("%s kind: %w: empty kind", verb, store.ErrInvalidParams)
	}
	if err := store.CheckText(kind, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("%s kind: %w: %w", verb, store.ErrInvalidParams, err)
	}
	var out *store.KindState
	err := s.write(ctx, func(w *wtx) error {
		var was int64
		var updated int64
		err := w.queryRow(qKindGet, kind).Scan(&was, &updated)
		known := err == nil
		if err != nil && err != sql.ErrNoRows {
			return err
		}
		switch {
		case !paused:
			// Only a pause is kept: a resume deletes the row (a row of
			// a kind not paused, left by an older version, included).
			out = &store.KindState{Kind: kind}
			if !known {
				return nil
			}
			if _, err := w.exec(qKindDel, kind); err != nil {
				return err
			}
			if was == 0 {
				return nil
			}
		case known && was != 0:
			out = &store.KindState{Kind: kind, Paused: true, UpdatedAt: fromUS(updated)}
			return nil
		default:
			if _, err := w.exec(qKindPut, kind, boolInt(paused), toUS(w.now)); err != nil {
				return err
			}
		}
		if w.s.subs.any() { // a changed pause or resume: every host re-reads the set
			w.notes.list = append(w.notes.list, store.Notification{})
		}
		out = &store.KindState{Kind: kind, Paused: paused, UpdatedAt: w.now}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s kind %q: %w", verb, kind, err)
	}
	return out, nil
}

// KindStates returns the paused kinds' states, ordered by kind; see
// store.KindPauser.
func (s *Store) KindStates(ctx context.Context) ([]store.KindState, error) {
	out := []store.KindState{}
	err := s.read(ctx, false, func(r *rtx) error {
		rows, err := r.query(qKindsAll)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ks store.KindState
			var paused, updated int64
			if err := rows.Scan(&ks.Kind, &paused, &updated); err != nil {
				return err
			}
			ks.Paused, ks.UpdatedAt = paused != 0, fromUS(updated)
			out = append(out, ks)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("kind states: %w", err)
	}
	return out, nil
}
