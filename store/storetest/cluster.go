package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testCluster checks the optional Leaser and NodeRegistry interfaces.
func testCluster(t *testing.T, newStore NewStoreFunc) {
	t.Run("Leaser", func(t *testing.T) { testLeaser(t, newStore) })
	t.Run("NodeRegistry", func(t *testing.T) { testNodeRegistry(t, newStore) })
}

const leaderName = "storetest-leader"

func acquire(t *testing.T, l store.Leaser, name, holder string, ttl time.Duration) *store.Leadership {
	t.Helper()
	got, err := l.AcquireLeader(t.Context(), &store.LeaderParams{Name: name, Holder: holder, TTL: ttl})
	require.NoError(t, err)
	return got
}

func testLeaser(t *testing.T, newStore NewStoreFunc) {
	t.Run("AcquireRenewRefuse", func(t *testing.T) {
		st := newStore(t)
		l := as[store.Leaser](t, st)
		before := storeNow(t, st)
		a := acquire(t, l, leaderName, "a", longLease)
		require.True(t, a.Held)
		require.Equal(t, "a", a.Holder)
		require.Positive(t, a.Term)
		requireTimeNear(t, before.Add(longLease), a.ExpiresAt, clockTolerance)

		b := acquire(t, l, leaderName, "b", longLease)
		require.False(t, b.Held, "a second node got a held lease")
		require.Equal(t, "a", b.Holder)
		require.Equal(t, a.Term, b.Term)

		renewed := acquire(t, l, leaderName, "a", longLease)
		require.True(t, renewed.Held)
		require.Equal(t, a.Term, renewed.Term, "a renewal changed the term")
		require.False(t, renewed.ExpiresAt.Before(a.ExpiresAt), "a renewal moved the expiry back")

		other := acquire(t, l, leaderName+"-other", "b", longLease)
		require.True(t, other.Held, "leases of different names are independent")
	})
	t.Run("ExpiryHandsOver", func(t *testing.T) {
		st := newStore(t)
		l := as[store.Leaser](t, st)
		a := acquire(t, l, leaderName, "a", shortLease)
		require.True(t, a.Held)
		waitUntilStoreTime(t, st, a.ExpiresAt)
		b := acquire(t, l, leaderName, "b", longLease)
		require.True(t, b.Held, "an expired lease was not taken over")
		require.Equal(t, "b", b.Holder)
		require.Greater(t, b.Term, a.Term, "a new holder kept the old term")
		back := acquire(t, l, leaderName, "a", longLease)
		require.False(t, back.Held, "the old holder got its lease back from the new one")
		require.Equal(t, "b", back.Holder)
	})
	t.Run("ExpiredButUntakenRenews", func(t *testing.T) {
		st := newStore(t)
		l := as[store.Leaser](t, st)
		a := acquire(t, l, leaderName, "a", shortLease)
		waitUntilStoreTime(t, st, a.ExpiresAt)
		again := acquire(t, l, leaderName, "a", longLease)
		require.True(t, again.Held)
		require.Equal(t, a.Term, again.Term, "nobody held the lease in between: the term is kept")
	})
	t.Run("Release", func(t *testing.T) {
		st := newStore(t)
		l := as[store.Leaser](t, st)
		ctx := t.Context()
		ok, err := l.ReleaseLeader(ctx, leaderName, "a")
		require.NoError(t, err)
		require.False(t, ok, "released a lease never held")
		a := acquire(t, l, leaderName, "a", longLease)

		ok, err = l.ReleaseLeader(ctx, leaderName, "b")
		require.NoError(t, err)
		require.False(t, ok, "a non-holder released the lease")
		require.False(t, acquire(t, l, leaderName, "b", longLease).Held)

		ok, err = l.ReleaseLeader(ctx, leaderName, "a")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = l.ReleaseLeader(ctx, leaderName, "a")
		require.NoError(t, err)
		require.False(t, ok, "released twice")

		b := acquire(t, l, leaderName, "b", longLease)
		require.True(t, b.Held, "a released lease was not free at once")
		require.Greater(t, b.Term, a.Term)

		ok, err = l.ReleaseLeader(ctx, leaderName, "b")
		require.NoError(t, err)
		require.True(t, ok)
		b2 := acquire(t, l, leaderName, "b", longLease)
		require.True(t, b2.Held)
		require.Greater(t, b2.Term, b.Term, "re-acquiring after a release must start a new term")
	})
	t.Run("ConcurrentAcquireElectsOne", func(t *testing.T) {
		st := newStore(t)
		l := as[store.Leaser](t, st)
		const n = 8
		held := make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got, err := l.AcquireLeader(t.Context(), &store.LeaderParams{
					Name: leaderName, Holder: string(rune('a' + i)), TTL: longLease,
				})
				if err == nil {
					held[i] = got.Held
				}
			})
		}
		wg.Wait()
		count := 0
		for _, h := range held {
			if h {
				count++
			}
		}
		require.Equal(t, 1, count, "concurrent acquires: want exactly one holder")
	})
	t.Run("InvalidParams", func(t *testing.T) {
		st := newStore(t)
		l := as[store.Leaser](t, st)
		for _, p := range []store.LeaderParams{
			{Holder: "a", TTL: time.Second},
			{Name: leaderName, TTL: time.Second},
			{Name: leaderName, Holder: "a"},
			{Name: leaderName, Holder: "a", TTL: -time.Second},
		} {
			_, err := l.AcquireLeader(t.Context(), &p)
			require.ErrorIs(t, err, store.ErrInvalidParams, "%+v", p)
		}
		b := acquire(t, l, leaderName, "b", longLease)
		require.True(t, b.Held, "an invalid call changed the lease")
	})
}

// node returns the registered node named name, or nil.
func node(t *testing.T, r store.NodeRegistry, name string) *store.NodeRecord {
	t.Helper()
	nodes, err := r.ListNodes(t.Context())
	require.NoError(t, err)
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func heartbeatNode(t *testing.T, r store.NodeRegistry, p store.NodeParams) {
	t.Helper()
	require.NoError(t, r.HeartbeatNode(t.Context(), &p))
}

func testNodeRegistry(t *testing.T, newStore NewStoreFunc) {
	t.Run("RegisterHeartbeatList", func(t *testing.T) {
		st := newStore(t)
		r := as[store.NodeRegistry](t, st)
		nodes, err := r.ListNodes(t.Context())
		require.NoError(t, err)
		require.Empty(t, nodes)

		before := storeNow(t, st)
		heartbeatNode(t, r, store.NodeParams{Name: "n1", Version: "v1", Kinds: []string{"a", "b"},
			KeyIDs: []string{"k2", "k1"}, TTL: longLease})
		n1 := node(t, r, "n1")
		require.NotNil(t, n1)
		require.Equal(t, store.NodeRunning, n1.State)
		require.Equal(t, "v1", n1.Version)
		require.Equal(t, []string{"a", "b"}, n1.Kinds)
		require.Equal(t, []string{"k2", "k1"}, n1.KeyIDs, "key IDs in order, current first")
		requireTimeNear(t, before, n1.StartedAt, clockTolerance)
		requireTimeNear(t, n1.StartedAt, n1.HeartbeatAt, storedTolerance)
		requireTimeNear(t, n1.HeartbeatAt.Add(longLease), n1.ExpiresAt, storedTolerance)

		waitUntilStoreTime(t, st, n1.HeartbeatAt)
		heartbeatNode(t, r, store.NodeParams{Name: "n2", TTL: longLease})
		heartbeatNode(t, r, store.NodeParams{Name: "n1", Version: "v2", Kinds: []string{"c"}, TTL: longLease})
		again := node(t, r, "n1")
		requireTimeNear(t, n1.StartedAt, again.StartedAt, storedTolerance, "a heartbeat moved StartedAt")
		require.True(t, again.HeartbeatAt.After(n1.HeartbeatAt), "a heartbeat did not advance HeartbeatAt")
		require.Equal(t, "v2", again.Version)
		require.Equal(t, []string{"c"}, again.Kinds)
		require.Empty(t, again.KeyIDs, "a heartbeat replaces the key IDs")

		nodes, err = r.ListNodes(t.Context())
		require.NoError(t, err)
		require.Len(t, nodes, 2)
		require.Equal(t, "n1", nodes[0].Name, "nodes are listed by start time")
		require.Equal(t, "n2", nodes[1].Name)
		require.Empty(t, nodes[1].Kinds)
	})
	t.Run("Stop", func(t *testing.T) {
		st := newStore(t)
		r := as[store.NodeRegistry](t, st)
		ok, err := r.StopNode(t.Context(), "ghost")
		require.NoError(t, err)
		require.False(t, ok)
		heartbeatNode(t, r, store.NodeParams{Name: "n1", TTL: longLease})
		ok, err = r.StopNode(t.Context(), "n1")
		require.NoError(t, err)
		require.True(t, ok)
		n1 := node(t, r, "n1")
		require.Equal(t, store.NodeStopped, n1.State)
		requireTimeNear(t, storeNow(t, st), n1.ExpiresAt, clockTolerance)

		dead, removed, err := r.ReapNodes(t.Context(), &store.ReapParams{Retention: longLease})
		require.NoError(t, err)
		require.Empty(t, dead, "a recently stopped node was reaped")
		require.Empty(t, removed, "a recently stopped node was reaped")

		heartbeatNode(t, r, store.NodeParams{Name: "n1", TTL: longLease})
		require.Equal(t, store.NodeRunning, node(t, r, "n1").State, "a heartbeat revives a stopped node")
	})
	t.Run("ReapMarksDeadThenRemoves", func(t *testing.T) {
		st := newStore(t)
		r := as[store.NodeRegistry](t, st)
		heartbeatNode(t, r, store.NodeParams{Name: "alive", TTL: longLease})
		heartbeatNode(t, r, store.NodeParams{Name: "lapsed", TTL: shortLease})
		heartbeatNode(t, r, store.NodeParams{Name: "stopped", TTL: longLease})
		_, err := r.StopNode(t.Context(), "stopped")
		require.NoError(t, err)
		waitUntilStoreTime(t, st, node(t, r, "lapsed").ExpiresAt)

		dead, removed, err := r.ReapNodes(t.Context(), &store.ReapParams{Retention: longLease})
		require.NoError(t, err)
		require.Equal(t, []string{"lapsed"}, dead)
		require.Empty(t, removed)
		require.Equal(t, store.NodeDead, node(t, r, "lapsed").State)
		require.Equal(t, store.NodeRunning, node(t, r, "alive").State)
		require.Equal(t, store.NodeStopped, node(t, r, "stopped").State)

		heartbeatNode(t, r, store.NodeParams{Name: "lapsed", TTL: shortLease})
		require.Equal(t, store.NodeRunning, node(t, r, "lapsed").State, "a heartbeat revives a dead node")
		waitUntilStoreTime(t, st, node(t, r, "lapsed").ExpiresAt)
		dead, _, err = r.ReapNodes(t.Context(), &store.ReapParams{Retention: longLease})
		require.NoError(t, err)
		require.Equal(t, []string{"lapsed"}, dead)

		waitUntilStoreTime(t, st, node(t, r, "lapsed").ExpiresAt.Add(shortLease))
		dead, removed, err = r.ReapNodes(t.Context(), &store.ReapParams{Retention: shortLease})
		require.NoError(t, err)
		require.Empty(t, dead)
		require.Equal(t, []string{"lapsed", "stopped"}, removed, "the dead and the stopped node are past retention")
		require.Nil(t, node(t, r, "lapsed"))
		require.Nil(t, node(t, r, "stopped"))
		require.NotNil(t, node(t, r, "alive"))
	})
	t.Run("ReapedNamesSorted", func(t *testing.T) {
		// Names come back in byte order (upper case before lower case),
		// whatever the database's collation.
		st := newStore(t)
		r := as[store.NodeRegistry](t, st)
		names := []string{"node-b", "Node-z", "node-a", "ñode", "node-B"}
		var latest time.Time
		for _, name := range names {
			heartbeatNode(t, r, store.NodeParams{Name: name, TTL: shortLease})
			latest = maxTime(latest, node(t, r, name).ExpiresAt)
		}
		waitUntilStoreTime(t, st, latest)
		dead, removed, err := r.ReapNodes(t.Context(), &store.ReapParams{Retention: longLease})
		require.NoError(t, err)
		want := []string{"Node-z", "node-B", "node-a", "node-b", "ñode"}
		require.Equal(t, want, dead)
		require.Empty(t, removed)

		waitUntilStoreTime(t, st, latest.Add(shortLease))
		dead, removed, err = r.ReapNodes(t.Context(), &store.ReapParams{Retention: shortLease})
		require.NoError(t, err)
		require.Empty(t, dead)
		require.Equal(t, want, removed)
	})
	t.Run("InvalidParams", func(t *testing.T) {
		st := newStore(t)
		r := as[store.NodeRegistry](t, st)
		for _, p := range []store.NodeParams{
			{TTL: time.Second},
			{Name: "n1"},
			{Name: "n1", TTL: -time.Second},
		} {
			require.ErrorIs(t, r.HeartbeatNode(t.Context(), &p), store.ErrInvalidParams, "%+v", p)
		}
		_, _, err := r.ReapNodes(t.Context(), &store.ReapParams{Retention: -time.Second})
		require.ErrorIs(t, err, store.ErrInvalidParams)
		nodes, err := r.ListNodes(t.Context())
		require.NoError(t, err)
		require.Empty(t, nodes, "an invalid call registered a node")
	})
}
