package storetest

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testNonceKeeper checks the optional NonceKeeper: a nonce is fresh once,
// refused while it lives, fresh again once expired (store clock); nonces
// are independent of each other; concurrent callers see exactly one
// fresh; invalid nonces are refused.
func testNonceKeeper(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.NonceKeeper](t, newStore)
	remember := func(t *testing.T, nk store.NonceKeeper, nonce string, until time.Time) bool {
		t.Helper()
		fresh, err := nk.RememberNonce(t.Context(), nonce, until)
		require.NoError(t, err)
		return fresh
	}
	t.Run("FreshOnce", func(t *testing.T) {
		st := newStore(t)
		nk := as[store.NonceKeeper](t, st)
		until := storeNow(t, st).Add(longLease)
		require.True(t, remember(t, nk, "app:nonce-one-0123456789", until), "a new nonce")
		require.False(t, remember(t, nk, "app:nonce-one-0123456789", until), "the same nonce again")
		require.False(t, remember(t, nk, "app:nonce-one-0123456789", until.Add(time.Hour)), "a later expiry does not make it new")
		require.True(t, remember(t, nk, "app:nonce-two-0123456789", until), "another nonce")
		require.True(t, remember(t, nk, "other:nonce-one-0123456789", until), "the same nonce of another key")
	})
	t.Run("Expires", func(t *testing.T) {
		st := newStore(t)
		nk := as[store.NonceKeeper](t, st)
		until := storeNow(t, st).Add(shortLease)
		require.True(t, remember(t, nk, "expiring-nonce-0123456789", until))
		again := remember(t, nk, "expiring-nonce-0123456789", until)
		if storeNow(t, st).Before(until) { // else a slow machine let it expire first
			require.False(t, again, "a nonce is kept until it expires")
		}
		waitUntilStoreTime(t, st, until.Add(time.Millisecond))
		require.True(t, remember(t, nk, "expiring-nonce-0123456789", storeNow(t, st).Add(longLease)), "an expired nonce is forgotten")
		require.False(t, remember(t, nk, "expiring-nonce-0123456789", storeNow(t, st).Add(longLease)))
	})
	t.Run("AlreadyExpired", func(t *testing.T) {
		st := newStore(t)
		nk := as[store.NonceKeeper](t, st)
		past := storeNow(t, st).Add(-time.Minute)
		require.True(t, remember(t, nk, "past-nonce-0123456789", past))
		require.True(t, remember(t, nk, "past-nonce-0123456789", past), "a nonce recorded already expired is not kept")
	})
	t.Run("Concurrent", func(t *testing.T) {
		st := newStore(t)
		nk := as[store.NonceKeeper](t, st)
		until := storeNow(t, st).Add(longLease)
		var fresh atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := nk.RememberNonce(t.Context(), "raced-nonce-0123456789", until)
				if err == nil && ok {
					fresh.Add(1)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int64(1), fresh.Load(), "exactly one caller sees a nonce as new")
	})
	t.Run("Invalid", func(t *testing.T) {
		st := newStore(t)
		nk := as[store.NonceKeeper](t, st)
		until := storeNow(t, st).Add(longLease)
		for _, n := range []string{"", invalidUTF8, "a\x00b", strings.Repeat("n", store.MaxNonceLength+1)} {
			_, err := nk.RememberNonce(t.Context(), n, until)
			require.ErrorIs(t, err, store.ErrInvalidParams, "nonce %q", n)
		}
		require.True(t, remember(t, nk, strings.Repeat("n", store.MaxNonceLength), until), "the longest nonce")
	})
}
