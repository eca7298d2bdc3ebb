package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testLeaderReader checks the optional LeaderReader against the Leaser's
// transitions: never held, held, released, expired.
func testLeaderReader(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	lr := as[store.LeaderReader](t, st)
	l := as[store.Leaser](t, st)
	read := func(t *testing.T, name string) *store.Leadership {
		t.Helper()
		got, err := lr.Leader(t.Context(), name)
		require.NoError(t, err)
		require.NotNil(t, got)
		return got
	}

	never := read(t, leaderName)
	require.Equal(t, store.Leadership{}, *never, "a lease never held")

	a := acquire(t, l, leaderName, "a", longLease)
	held := read(t, leaderName)
	require.True(t, held.Held)
	require.Equal(t, "a", held.Holder)
	require.Equal(t, a.Term, held.Term)
	requireTimeNear(t, a.ExpiresAt, held.ExpiresAt, storedTolerance)
	require.Equal(t, *held, *read(t, leaderName), "reading changed the lease")
	require.False(t, acquire(t, l, leaderName, "b", longLease).Held, "a reader took the lease")

	ok, err := l.ReleaseLeader(t.Context(), leaderName, "a")
	require.NoError(t, err)
	require.True(t, ok)
	released := read(t, leaderName)
	require.Equal(t, store.Leadership{Term: a.Term}, *released, "a released lease")

	short := acquire(t, l, leaderName, "c", shortLease)
	require.True(t, short.Held)
	waitUntilStoreTime(t, st, short.ExpiresAt)
	expired := read(t, leaderName)
	require.Equal(t, store.Leadership{Term: short.Term}, *expired, "an expired lease")

	for _, name := range []string{invalidUTF8, "a\x00b"} {
		_, err := lr.Leader(t.Context(), name)
		require.ErrorIs(t, err, store.ErrInvalidParams, "name %q", name)
	}
}
