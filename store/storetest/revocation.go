package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testRevocationKeeper checks the optional RevocationKeeper: a revoked
// name is found until it expires (store clock), a second revocation keeps
// the later expiry, names are independent of each other and of nonces,
// and invalid names, expiries and lookups are refused.
func testRevocationKeeper(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.RevocationKeeper](t, newStore)
	lookup := func(t *testing.T, rk store.RevocationKeeper, names ...string) map[string]time.Time {
		t.Helper()
		got, err := rk.Revocations(t.Context(), names)
		require.NoError(t, err)
		return got
	}
	t.Run("FoundUntilExpiry", func(t *testing.T) {
		st := newStore(t)
		rk := as[store.RevocationKeeper](t, st)
		until := storeNow(t, st).Add(longLease)
		require.Empty(t, lookup(t, rk, "session/one", "session/two"), "nothing revoked yet")
		require.NoError(t, rk.Revoke(t.Context(), "session/one", until))
		got := lookup(t, rk, "session/one", "session/two")
		require.Len(t, got, 1, "only the revoked name")
		require.WithinDuration(t, until, got["session/one"], storedTolerance)
		require.Empty(t, lookup(t, rk), "no names")
	})
	t.Run("LaterExpiryKept", func(t *testing.T) {
		st := newStore(t)
		rk := as[store.RevocationKeeper](t, st)
		now := storeNow(t, st)
		require.NoError(t, rk.Revoke(t.Context(), "key/app", now.Add(2*longLease)))
		require.NoError(t, rk.Revoke(t.Context(), "key/app", now.Add(longLease)))
		require.WithinDuration(t, now.Add(2*longLease), lookup(t, rk, "key/app")["key/app"], storedTolerance, "an earlier expiry does not shorten it")
		require.NoError(t, rk.Revoke(t.Context(), "key/app", now.Add(3*longLease)))
		require.WithinDuration(t, now.Add(3*longLease), lookup(t, rk, "key/app")["key/app"], storedTolerance, "a later one lengthens it")
	})
	t.Run("Expires", func(t *testing.T) {
		st := newStore(t)
		rk := as[store.RevocationKeeper](t, st)
		until := storeNow(t, st).Add(shortLease)
		// Whether it is found before then is FoundUntilExpiry's test: a
		// slow machine can let a short expiry pass before the lookup.
		require.NoError(t, rk.Revoke(t.Context(), "session/short", until))
		waitUntilStoreTime(t, st, until.Add(time.Millisecond))
		require.Empty(t, lookup(t, rk, "session/short"), "an expired revocation is forgotten")
		require.NoError(t, rk.Revoke(t.Context(), "session/past", storeNow(t, st).Add(-time.Minute)))
		require.Empty(t, lookup(t, rk, "session/past"), "a revocation recorded already expired")
	})
	t.Run("ApartFromNonces", func(t *testing.T) {
		st := newStore(t)
		rk := as[store.RevocationKeeper](t, st)
		until := storeNow(t, st).Add(longLease)
		require.NoError(t, rk.Revoke(t.Context(), "shared-name-0123456789", until))
		if nk, ok := st.(store.NonceKeeper); ok {
			fresh, err := nk.RememberNonce(t.Context(), "shared-name-0123456789", until)
			require.NoError(t, err)
			require.True(t, fresh, "a revocation is not a nonce")
			fresh, err = nk.RememberNonce(t.Context(), "nonce-only-0123456789", until)
			require.NoError(t, err)
			require.True(t, fresh)
		}
		require.Empty(t, lookup(t, rk, "nonce-only-0123456789"), "a nonce is not a revocation")
	})
	t.Run("Invalid", func(t *testing.T) {
		st := newStore(t)
		rk := as[store.RevocationKeeper](t, st)
		until := storeNow(t, st).Add(longLease)
		for _, n := range []string{"", invalidUTF8, "a\x00b", strings.Repeat("n", store.MaxNonceLength+1)} {
			require.ErrorIs(t, rk.Revoke(t.Context(), n, until), store.ErrInvalidParams, "revoke %q", n)
			_, err := rk.Revocations(t.Context(), []string{"fine", n})
			require.ErrorIs(t, err, store.ErrInvalidParams, "look up %q", n)
		}
		require.ErrorIs(t, rk.Revoke(t.Context(), "fine", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)), store.ErrInvalidParams, "expiry past 9999")
		_, err := rk.Revocations(t.Context(), make([]string, store.MaxRevocationNames+1))
		require.ErrorIs(t, err, store.ErrInvalidParams, "too many names")
		long := strings.Repeat("n", store.MaxNonceLength)
		require.NoError(t, rk.Revoke(t.Context(), long, until), "the longest name")
		require.Contains(t, lookup(t, rk, long), long)
	})
}
