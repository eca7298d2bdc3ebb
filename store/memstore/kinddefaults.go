package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/axsched/ax/store"
)

var _ store.KindDefaulter = (*Store)(nil)

// DeclareKindDefaults stores each kind's job defaults, replacing what was
// stored (UpdatedAt = now); see store.KindDefaulter.
func (s *Store) DeclareKindDefaults(ctx context.Context, defaults []store.KindDefaults) error {
	if err := store.ValidateKindDefaults(defaults); err != nil {
		return fmt.Errorf("declare kind defaults: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("declare kind defaults: %w", err)
	}
	defer s.mu.Unlock()
	if s.kindDefaults == nil {
		s.kindDefaults = make(map[string]store.KindDefaults)
	}
	now := s.clock()
	for _, d := range defaults {
		d.UpdatedAt = now
		s.kindDefaults[d.Kind] = d
	}
	return nil
}

// KindDefaults returns the stored defaults of those of kinds that have
// some, ordered by kind; see store.KindDefaulter.
func (s *Store) KindDefaults(ctx context.Context, kinds []string) ([]store.KindDefaults, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("kind defaults: %w", err)
	}
	defer s.mu.Unlock()
	out := []store.KindDefaults{}
	seen := make(map[string]bool, len(kinds))
	for _, k := range kinds {
		if d, ok := s.kindDefaults[k]; ok && !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b store.KindDefaults) int { return strings.Compare(a.Kind, b.Kind) })
	return out, nil
}
