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

// readCountingStore counts the reads a Scheduler makes to schedule (kind
// defaults and the node registry) with a context that carries
// countedCall. Only the calls made under the handler's Then are marked:
// the reads another attempt's outcome makes at the same moment (which
// CI's timing interleaved with a Then once) are not Then's.
type readCountingStore struct {
	*memstore.Store
	reads atomic.Int64
}

// countedCall marks the context a test handler passes to Then.
type countedCall struct{}

func (c *readCountingStore) count(ctx context.Context) {
	if ctx.Value(countedCall{}) != nil {
		c.reads.Add(1)
	}
}

func (c *readCountingStore) KindDefaults(ctx context.Context, kinds []string) ([]store.KindDefaults, error) {
	c.count(ctx)
	return c.Store.KindDefaults(ctx, kinds)
}

func (c *readCountingStore) ListNodes(ctx context.Context) ([]*store.NodeRecord, error) {
	c.count(ctx)
	return c.Store.ListNodes(ctx)
}

// TestThenMakesNoStoreCall (issue 41): Then, which a handler may call
// with its transaction open on its pool's last connection, makes no store
// call; what it needs from the store (the kind's stored defaults, the
// cluster's kinds for Config.RefuseUnknownKinds) is read with the
// outcome. The Then job still gets its kind's stored defaults, and a kind
// no node handles still fails the attempt with ErrUnknownKind, inserting
// nothing. Before the fix Then read the kind's defaults on a second
// connection (one read here), which waited for ever on a pool held by
// handlers' transactions.
func TestThenMakesNoStoreCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		st := &readCountingStore{Store: memstore.New()}
		require.NoError(t, st.DeclareKindDefaults(ctx, []store.KindDefaults{{Kind: "remote", MaxAttempts: 4, Priority: store.PriorityLow}}))
		require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker", Kinds: []string{"remote"}, TTL: time.Hour}))
		s := newScheduler(t, st, func(c *ax.Config) { c.RefuseUnknownKinds = true })
		reads := make(chan int64, 2)
		require.NoError(t, ax.Handle(s, "parent", func(ctx context.Context, _ *ax.Job, kind string) error {
			before := st.reads.Load()
			err := ax.Then(context.WithValue(ctx, countedCall{}, true), kind, nil)
			reads <- st.reads.Load() - before
			return err
		}, ax.MaxAttempts(1)))
		start(t, s)

		known, err := s.Schedule(ctx, "parent", "remote")
		require.NoError(t, err)
		unknown, err := s.Schedule(ctx, "parent", "nobody")
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Zero(t, <-reads, "Then read the store")
		require.Zero(t, <-reads, "Then read the store")

		rec, err := s.Get(ctx, known.ID)
		require.NoError(t, err)
		require.Equal(t, ax.StateSucceeded, rec.State)
		ups, err := st.FollowUps(ctx, known.ID)
		require.NoError(t, err)
		require.Len(t, ups, 1)
		require.Equal(t, "remote", ups[0].Kind)
		require.Equal(t, 4, ups[0].MaxAttempts, "the kind's stored defaults")
		require.Equal(t, store.PriorityLow, ups[0].Priority, "the kind's stored defaults")

		rec, err = s.Get(ctx, unknown.ID)
		require.NoError(t, err)
		require.Equal(t, ax.StateDead, rec.State)
		require.Contains(t, rec.Errors[0].Error, ax.ErrUnknownKind.Error())
		ups, err = st.FollowUps(ctx, unknown.ID)
		require.NoError(t, err)
		require.Empty(t, ups)
	})
}
