package memstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/axsched/ax/store"
)

var _ store.NonceKeeper = (*Store)(nil)

// maxNonces bounds the nonces one Store remembers: past it RememberNonce
// first forgets the expired ones, then refuses (an error, not a silent
// "fresh"), so a flood of valid requests cannot exhaust memory.
const maxNonces = 1_000_000

// nonceTable is one Store's remembered nonces. It is kept beside the Store
// (in nonceTables, keyed by a weak pointer to it) rather than in it, and
// guarded by the Store's lock like every other state.
type nonceTable struct {
	expires map[string]time.Time
}

// nonceTables maps each Store that remembered a nonce to its table; an
// entry goes when its Store is garbage collected.
var nonceTables struct {
	mu sync.Mutex
	m  map[weak.Pointer[Store]]*nonceTable
}

// nonces returns s's table, creating it on first use.
func (s *Store) nonces() *nonceTable {
	wp := weak.Make(s)
	nonceTables.mu.Lock()
	defer nonceTables.mu.Unlock()
	if nonceTables.m == nil {
		nonceTables.m = make(map[weak.Pointer[Store]]*nonceTable)
	}
	t := nonceTables.m[wp]
	if t == nil {
		t = &nonceTable{expires: make(map[string]time.Time)}
		nonceTables.m[wp] = t
		runtime.AddCleanup(s, func(wp weak.Pointer[Store]) {
			nonceTables.mu.Lock()
			delete(nonceTables.m, wp)
			nonceTables.mu.Unlock()
		}, wp)
	}
	return t
}

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
	t := s.nonces()
	if err := s.lock(ctx); err != nil {
		return false, fmt.Errorf("remember nonce: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	if exp, ok := t.expires[nonce]; ok && exp.After(now) {
		return false, nil
	}
	if len(t.expires) >= maxNonces {
		for n, exp := range t.expires {
			if !exp.After(now) {
				delete(t.expires, n)
			}
		}
		if len(t.expires) >= maxNonces {
			return false, fmt.Errorf("remember nonce: %d unexpired nonces held, the most this store keeps", len(t.expires))
		}
	}
	t.expires[nonce] = stamp(expiresAt)
	return true, nil
}
