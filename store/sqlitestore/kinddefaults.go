package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/axsched/ax/store"
)

var _ store.KindDefaulter = (*Store)(nil)

// DeclareKindDefaults stores each kind's job defaults in one write
// transaction, replacing what was stored (UpdatedAt = now); see
// store.KindDefaulter.
func (s *Store) DeclareKindDefaults(ctx context.Context, defaults []store.KindDefaults) error {
	if err := store.ValidateKindDefaults(defaults); err != nil {
		return fmt.Errorf("declare kind defaults: %w", err)
	}
	if len(defaults) == 0 {
		return nil
	}
	err := s.write(ctx, func(w *wtx) error {
		for _, d := range defaults {
			if _, err := w.exec(qKindDefaultPut, d.Kind, d.MaxAttempts, d.Priority, toUS(w.now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("declare kind defaults: %w", err)
	}
	return nil
}

// KindDefaults returns the stored defaults of those of kinds that have
// some, ordered by kind, read in one snapshot; see store.KindDefaulter.
func (s *Store) KindDefaults(ctx context.Context, kinds []string) ([]store.KindDefaults, error) {
	out := []store.KindDefaults{}
	if len(kinds) == 0 {
		return out, nil
	}
	sorted := slices.Clone(kinds)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	err := s.read(ctx, true, func(r *rtx) error {
		for _, k := range sorted {
			d := store.KindDefaults{Kind: k}
			var updated int64
			err := r.queryRow(qKindDefaultGet, k).Scan(&d.MaxAttempts, &d.Priority, &updated)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			d.UpdatedAt = fromUS(updated)
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kind defaults: %w", err)
	}
	return out, nil
}
