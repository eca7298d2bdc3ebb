package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.KindDefaulter = (*Store)(nil)

const (
	// declareKindDefaultsSQL upserts kinds' defaults in one statement; the
	// caller sorts the kinds, so that two hosts declaring overlapping
	// kinds lock their rows in the same order.
	declareKindDefaultsSQL = `INSERT INTO {kind_defaults} AS d (kind, max_attempts, priority)
SELECT * FROM unnest($1::text[], $2::integer[], $3::smallint[])
ON CONFLICT (kind) DO UPDATE SET
	max_attempts = excluded.max_attempts,
	priority = excluded.priority,
	updated_at = now()`

	kindDefaultsSQL = `SELECT kind, max_attempts, priority, updated_at FROM {kind_defaults}
WHERE kind = ANY($1::text[]) ORDER BY kind COLLATE "C"`
)

// kindDefaultsSQL substitutes the schema-qualified kind_defaults table
// (migration 0010) for {kind_defaults}.
func (s *Store) kindDefaultsSQL(q string) string {
	return strings.ReplaceAll(q, "{kind_defaults}", pgx.Identifier{s.schema, "kind_defaults"}.Sanitize())
}

// DeclareKindDefaults stores each kind's job defaults in one statement,
// replacing what was stored (updated_at = now()); see
// store.KindDefaulter.
func (s *Store) DeclareKindDefaults(ctx context.Context, defaults []store.KindDefaults) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := store.ValidateKindDefaults(defaults); err != nil {
		return fmt.Errorf("pgstore: declare kind defaults: %w", err)
	}
	if len(defaults) == 0 {
		return nil
	}
	sorted := slices.Clone(defaults)
	slices.SortFunc(sorted, func(a, b store.KindDefaults) int { return strings.Compare(a.Kind, b.Kind) })
	kinds := make([]string, len(sorted))
	attempts := make([]int32, len(sorted))
	priorities := make([]int16, len(sorted))
	for i, d := range sorted {
		kinds[i], attempts[i], priorities[i] = d.Kind, int32(d.MaxAttempts), int16(d.Priority)
	}
	if _, err := s.pool.Exec(ctx, s.kindDefaultsSQL(declareKindDefaultsSQL), kinds, attempts, priorities); err != nil {
		return fmt.Errorf("pgstore: declare kind defaults: %w", invalidData(err))
	}
	return nil
}

// KindDefaults returns the stored defaults of those of kinds that have
// some, ordered by kind in byte order; see store.KindDefaulter.
func (s *Store) KindDefaults(ctx context.Context, kinds []string) ([]store.KindDefaults, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := []store.KindDefaults{}
	if len(kinds) == 0 {
		return out, nil
	}
	rows, _ := s.conn(ctx).Query(ctx, s.kindDefaultsSQL(kindDefaultsSQL), kinds) // a caller's tx when ctx has one: onetx.go
	var d store.KindDefaults
	_, err := pgx.ForEachRow(rows, []any{&d.Kind, &d.MaxAttempts, &d.Priority, &d.UpdatedAt}, func() error {
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: kind defaults: %w", invalidData(err))
	}
	return out, nil
}
