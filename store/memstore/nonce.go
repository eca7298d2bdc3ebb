package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

var _ store.NonceKeeper = (*Store)(nil)

// maxNonces bounds the nonces one Store remembers: past it RememberNonce
// first forgets the expired ones, then refuses (an error, not a silent
// "fresh"), so a flood of valid requests cannot exhaust memory.
const maxNonces = 1_000_000

// RememberNonce records nonce until expiresAt and reports whether it was
// new: false when the same nonce is recorded and not yet expired at the
// store's clock; see store.NonceKeeper. An empty nonce, one longer than
// store.MaxNonceLength bytes or not a storable text fails with an error
// wrapping store.ErrInvalidParams. Expired nonces are forgotten when the
// table reaches its bound (a million nonces); a full table of live nonces
// is an error.
func (s *Store) RememberNonce(ctx context.Context, nonce string, expiresAt time.Time) (bool, error) {
	if nonce == "" {
		return false, fmt.Errorf("remember nonce: %w: empty nonce", store.ErrInvalidParams)
	}
	if err := store.CheckText(nonce, store.MaxNonceLength); err != nil {
		return false, fmt.Errorf("remember nonce: %w: %w", store.ErrInvalidParams, err)
	}
	if err := store.CheckTime(expiresAt); err != nil {
		return false, fmt.Errorf("remember nonce: %w: expiry: %w", store.ErrInvalidParams, err)
	}
	if err := s.lock(ctx); err != nil {
		return false, fmt.Errorf("remember nonce: %w", err)
	}
	defer s.mu.Unlock()
	if s.nonces == nil {
		s.nonces = make(map[string]time.Time)
	}
	now := s.clock()
	if exp, ok := s.nonces[nonce]; ok && exp.After(now) {
		return false, nil
	}
	if len(s.nonces) >= maxNonces {
		for n, exp := range s.nonces {
			if !exp.After(now) {
				delete(s.nonces, n)
			}
		}
		if len(s.nonces) >= maxNonces {
			return false, fmt.Errorf("remember nonce: %d unexpired nonces held, the most this store keeps", len(s.nonces))
		}
	}
	s.nonces[nonce] = stamp(expiresAt)
	return true, nil
}
