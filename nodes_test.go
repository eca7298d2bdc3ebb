package ax_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

func nop(context.Context, *ax.Job) error { return nil }

// nodeNamed returns the listed node named name, or nil.
func nodeNamed(nodes []ax.Node, name string) *ax.Node {
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i]
		}
	}
	return nil
}

// TestNodes follows nodes through the registry: registered with version
// and kinds at Start, heartbeating, stopped at Stop, and a node that
// vanished marked dead by the leader and removed after NodeRetention.
func TestNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := memstore.New()
		ctx := t.Context()
		a := newScheduler(t, shared, func(c *ax.Config) {
			c.Node, c.Version, c.LeaderTTL = "a", "v-test", testLeaderTTL
		})
		require.NoError(t, a.Handle("k2", ax.HandlerFunc(nop)))
		require.NoError(t, a.Handle("k1", ax.HandlerFunc(nop)))
		nodes, err := a.Nodes(ctx)
		require.NoError(t, err)
		require.Empty(t, nodes, "a Scheduler registers at Start")

		start(t, a)
		synctest.Wait()
		nodes, err = a.Nodes(ctx)
		require.NoError(t, err)
		require.Len(t, nodes, 1)
		n := nodes[0]
		require.Equal(t, "a", n.Name)
		require.Equal(t, "v-test", n.Version)
		require.Equal(t, []string{"k1", "k2"}, n.Kinds)
		require.Equal(t, ax.NodeRunning, n.State)
		require.True(t, n.Leader)
		require.False(t, n.StartedAt.IsZero())

		b := newScheduler(t, shared, func(c *ax.Config) {
			c.Node, c.LeaderTTL, c.NodeRetention = "b", testLeaderTTL, 5*time.Second
		})
		start(t, b)
		require.NoError(t, b.Handle("k3", ax.HandlerFunc(nop)))
		time.Sleep(testLeaderTTL)
		synctest.Wait()
		nodes, err = b.Nodes(ctx)
		require.NoError(t, err)
		require.Len(t, nodes, 2)
		require.Equal(t, []string{"a", "b"}, []string{nodes[0].Name, nodes[1].Name}, "oldest first")
		nb := nodeNamed(nodes, "b")
		require.NotEmpty(t, nb.Version, "default version from build info")
		require.Equal(t, []string{"k3"}, nb.Kinds, "a kind handled after Start is heartbeated")
		require.True(t, nodeNamed(nodes, "a").Leader)
		require.False(t, nb.Leader)
		require.True(t, nb.HeartbeatAt.After(nb.StartedAt))

		require.NoError(t, a.Stop(ctx))
		_, err = a.Nodes(ctx)
		require.ErrorIs(t, err, ax.ErrSchedulerClosed)
		time.Sleep(testLeaderTTL / 3)
		synctest.Wait()
		nodes, err = b.Nodes(ctx)
		require.NoError(t, err)
		require.Equal(t, ax.NodeStopped, nodeNamed(nodes, "a").State)
		require.False(t, nodeNamed(nodes, "a").Leader)
		require.True(t, nodeNamed(nodes, "b").Leader, "b took over the leadership")

		// A node that dies without stopping: one heartbeat, then nothing.
		require.NoError(t, shared.HeartbeatNode(ctx, &store.NodeParams{Name: "ghost", TTL: time.Second}))
		time.Sleep(time.Second + testLeaderTTL/3)
		synctest.Wait()
		nodes, err = b.Nodes(ctx)
		require.NoError(t, err)
		require.Equal(t, ax.NodeDead, nodeNamed(nodes, "ghost").State)

		time.Sleep(5*time.Second + testLeaderTTL/3)
		synctest.Wait()
		nodes, err = b.Nodes(ctx)
		require.NoError(t, err)
		require.Len(t, nodes, 1, "stopped and dead nodes are removed after NodeRetention")
		require.Equal(t, "b", nodes[0].Name)
	})
}

func TestClusterConfigValidation(t *testing.T) {
	for _, c := range []ax.Config{
		{LeaderTTL: -time.Second},
		{NodeTimeout: -time.Second},
		{NodeRetention: -time.Second},
		{LeaderTTL: 3 * time.Second, NodeTimeout: time.Second},
	} {
		c.Store = memstore.New()
		_, err := ax.New(c)
		require.ErrorIs(t, err, ax.ErrInvalidConfig, "%+v", c)
	}
}

// slowRegistry is a memstore whose node heartbeats take a while, as a
// busy database's do.
type slowRegistry struct{ *memstore.Store }

func (s slowRegistry) HeartbeatNode(ctx context.Context, p *store.NodeParams) error {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.HeartbeatNode(ctx, p)
}

// TestStartRegistersTheNode (issue 41): once Start has returned, Nodes
// lists the host, however long the registration takes. Start used to
// leave the first heartbeat to the cluster goroutine, so a probe listing
// nodes right after two hosts started found one at a load of 3 to 9.
func TestStartRegistersTheNode(t *testing.T) {
	st := slowRegistry{memstore.New()}
	for _, name := range []string{"host-a", "host-b"} {
		s := newScheduler(t, st, func(c *ax.Config) { c.Node = name })
		require.NoError(t, s.Handle("k", ax.HandlerFunc(nop)))
		start(t, s)
		nodes, err := s.Nodes(t.Context())
		require.NoError(t, err)
		require.NotNil(t, nodeNamed(nodes, name), "%s is not listed right after its Start: %+v", name, nodes)
	}
}

// TestStartRegistrationWaitsNoLongerThanItsContext: Start registers the
// node within its own context, as it makes its other store calls. With a
// store whose node heartbeat hangs, a Start given 2 s returns within them
// (the registration logged as failed), and the cluster goroutine
// registers the node once the store answers again. Start used to wait
// for the node row's lapse (NodeTimeout, 4.5 s here), whatever its
// context allowed.
func TestStartRegistrationWaitsNoLongerThanItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowNodesStore{Store: memstore.New()}
		st.slow.Store(int64(time.Hour))
		s := newScheduler(t, st, func(c *ax.Config) { c.Node, c.LeaderTTL = "a", testLeaderTTL })
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		began := time.Now()
		require.NoError(t, s.Start(ctx))
		require.LessOrEqual(t, time.Since(began), 2*time.Second, "Start outlived its context")

		st.slow.Store(0)
		time.Sleep(testLeaderTTL) // past the hung round's bound and a tick
		synctest.Wait()
		nodes, err := s.Nodes(t.Context())
		require.NoError(t, err)
		require.Len(t, nodes, 1, "the cluster goroutine did not register the node")
	})
}

// slowNodesStore is a memstore whose node heartbeats take slow
// nanoseconds (a loaded store), or until their context ends.
type slowNodesStore struct {
	*memstore.Store
	slow atomic.Int64
}

func (c *slowNodesStore) HeartbeatNode(ctx context.Context, p *store.NodeParams) error {
	if err := slowCall(ctx, time.Duration(c.slow.Load())); err != nil {
		return err
	}
	return c.Store.HeartbeatNode(ctx, p)
}

// TestNodeHeartbeatThroughASlowStore: a store that takes longer than the
// cluster tick (LeaderTTL/3) to take a node heartbeat, but less than half
// of NodeTimeout, registers the node and keeps it running: the call may
// run until the row would lapse (keepAliveTimeout). Bounded by the tick,
// every heartbeat timed out and the node never registered.
func TestNodeHeartbeatThroughASlowStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowNodesStore{Store: memstore.New()}
		st.slow.Store(int64(1200 * time.Millisecond)) // ticks every 1 s; NodeTimeout 4.5 s
		s := newScheduler(t, st, func(c *ax.Config) { c.Node, c.LeaderTTL = "a", testLeaderTTL })
		start(t, s)
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		for range 10 {
			time.Sleep(3 * time.Second)
			synctest.Wait()
			nodes, err := s.Nodes(t.Context())
			require.NoError(t, err)
			require.Len(t, nodes, 1, "the node is not registered")
			require.Equal(t, ax.NodeRunning, nodes[0].State)
		}
	})
}
