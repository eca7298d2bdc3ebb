package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

var _ store.RevocationKeeper = (*Store)(nil)

// Revoke records name until expiresAt, keeping the later expiry of a
// name already recorded; see store.RevocationKeeper. Expired revocations
// are forgotten when the table reaches its bound (a million); a full
// table of live ones is an error.
func (s *Store) Revoke(ctx context.Context, name string, expiresAt time.Time) error {
	if err := store.CheckRevocation(name, expiresAt); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	defer s.mu.Unlock()
	if s.revoked == nil {
		s.revoked = make(map[string]time.Time)
	}
	now := s.clock()
	if len(s.revoked) >= maxNonces {
		for n, exp := range s.revoked {
			if !exp.After(now) {
				delete(s.revoked, n)
			}
		}
		if len(s.revoked) >= maxNonces {
			return fmt.Errorf("revoke: %d unexpired revocations held, the most this store keeps", len(s.revoked))
		}
	}
	if exp := stamp(expiresAt); exp.After(s.revoked[name]) {
		s.revoked[name] = exp
	}
	return nil
}

// Revocations returns the expiry of each of names recorded and not yet
// expired at the store's clock; see store.RevocationKeeper.
func (s *Store) Revocations(ctx context.Context, names []string) (map[string]time.Time, error) {
	if err := store.CheckRevocationNames(names); err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	out := make(map[string]time.Time)
	for _, n := range names {
		if exp, ok := s.revoked[n]; ok && exp.After(now) {
			out[n] = exp
		}
	}
	return out, nil
}
