package axhttp

import (
	"context"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/axsched/ax/store"
)

// Session lifetimes (see session.go).
const (
	// DefaultSessionTTL is how long a dashboard login lasts at most.
	DefaultSessionTTL = 8 * time.Hour
	// DefaultSessionIdleTimeout ends a dashboard session that made no
	// request for this long.
	DefaultSessionIdleTimeout = 30 * time.Minute
	// MaxSessionTTL is the longest Config.SessionTTL: RevokeSessions
	// keeps a key's revocation this long, so it covers every session the
	// key may still have.
	MaxSessionTTL = 7 * 24 * time.Hour
)

// Revocation names. Neither contains ':', and both contain '/', which
// the nonces Auth records (key ID, ':', nonce of [A-Za-z0-9_-]) never
// have after their last ':', so they cannot meet in a store that keeps
// both in one table.
func sessionRevocation(sessionID string) string { return "session/" + sessionID }

func keyRevocation(keyID string) string { return "key/" + hex.EncodeToString([]byte(keyID)) }

// RevokeSessions ends every dashboard session of the key keyID opened
// at or before now, on every server whose Config.Revocations is rk (the
// cluster's store, when it implements store.RevocationKeeper): their
// next request is sent to the login form. Sessions opened later are not
// affected. It records the key's revocation until now + MaxSessionTTL
// (a later call replaces an earlier one). The CLI runs it as ax
// sessions revoke; Handler.RevokeSessions runs it on a handler's
// revocations with its clock.
func RevokeSessions(ctx context.Context, rk store.RevocationKeeper, keyID string, now time.Time) error {
	if keyID == "" || len(keyID) > 128 {
		return fmt.Errorf("axhttp: revoke sessions: %w: key ID must be 1 to 128 bytes", store.ErrInvalidParams)
	}
	if err := rk.Revoke(ctx, keyRevocation(keyID), now.Truncate(time.Microsecond).Add(MaxSessionTTL)); err != nil {
		return fmt.Errorf("axhttp: revoke sessions of %q: %w", keyID, err)
	}
	return nil
}

// RevokeSessions ends every dashboard session of the key keyID opened
// until now, on every server sharing the handler's Config.Revocations;
// see the function RevokeSessions.
func (h *Handler) RevokeSessions(ctx context.Context, keyID string) error {
	return RevokeSessions(ctx, h.sessions.revoked, keyID, h.cfg.Clock())
}

// revokedSession reports whether sess was logged out, or opened before
// its key's sessions were revoked.
func (s *sessions) revokedSession(ctx context.Context, sess session) (bool, error) {
	sn, kn := sessionRevocation(sess.ID), keyRevocation(sess.KeyID)
	got, err := s.revoked.Revocations(ctx, []string{sn, kn})
	if err != nil {
		return false, err
	}
	if _, ok := got[sn]; ok {
		return true, nil
	}
	if until, ok := got[kn]; ok && sess.Issued <= until.Add(-MaxSessionTTL).UnixMicro() {
		return true, nil
	}
	return false, nil
}

// revocationsFor returns the store's revocations when it keeps them
// (shared by every server on the store), otherwise ones kept in this
// process's memory.
func revocationsFor(st store.Store, now func() time.Time) (rk store.RevocationKeeper, shared bool) {
	if rk, ok := st.(store.RevocationKeeper); ok {
		return rk, true
	}
	return &memoryRevocations{now: now, entries: make(map[string]time.Time)}, false
}

// memoryRevocations keeps revocations for one process, when the store
// keeps none: a logout then holds on this server only.
type memoryRevocations struct {
	mu      sync.Mutex
	now     func() time.Time
	entries map[string]time.Time
}

// maxMemoryRevocations bounds memoryRevocations: past it the expired ones
// are dropped, then new ones refused (a logout that cannot be recorded
// fails rather than silently holds nowhere).
const maxMemoryRevocations = 100_000

// Revoke implements store.RevocationKeeper.
func (m *memoryRevocations) Revoke(_ context.Context, name string, expiresAt time.Time) error {
	if err := store.CheckRevocation(name, expiresAt); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.entries) >= maxMemoryRevocations {
		now := m.now()
		for n, exp := range m.entries {
			if !exp.After(now) {
				delete(m.entries, n)
			}
		}
		if len(m.entries) >= maxMemoryRevocations {
			return fmt.Errorf("axhttp: %d revocations held, the most kept in memory", len(m.entries))
		}
	}
	if expiresAt.After(m.entries[name]) {
		m.entries[name] = expiresAt
	}
	return nil
}

// Revocations implements store.RevocationKeeper.
func (m *memoryRevocations) Revocations(_ context.Context, names []string) (map[string]time.Time, error) {
	if err := store.CheckRevocationNames(names); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make(map[string]time.Time)
	for _, n := range names {
		if exp, ok := m.entries[n]; ok && exp.After(now) {
			out[n] = exp
		}
	}
	return out, nil
}
