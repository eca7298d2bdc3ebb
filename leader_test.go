package ax_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// countingStore is one host's view of a shared memstore that counts the
// maintenance calls this host makes.
type countingStore struct {
	*memstore.Store
	rescues atomic.Int64
	prunes  atomic.Int64
	// down makes leadership calls fail, as if the store were unreachable.
	down atomic.Bool
	// slow delays each leadership call by that many nanoseconds (a loaded
	// store), or until its context ends.
	slow atomic.Int64
}

func (c *countingStore) AcquireLeader(ctx context.Context, p *store.LeaderParams) (*store.Leadership, error) {
	if c.down.Load() {
		return nil, errors.New("store unreachable")
	}
	if err := slowCall(ctx, time.Duration(c.slow.Load())); err != nil {
		return nil, err
	}
	return c.Store.AcquireLeader(ctx, p)
}

func (c *countingStore) RescueExpired(ctx context.Context, limit int) ([]store.Rescued, error) {
	c.rescues.Add(1)
	return c.Store.RescueExpired(ctx, limit)
}

func (c *countingStore) Prune(ctx context.Context, p *store.PruneParams) (int, error) {
	c.prunes.Add(1)
	return c.Store.Prune(ctx, p)
}

// leaderLog records a Scheduler's EventLeaderChanged events.
type leaderLog struct {
	mu     sync.Mutex
	events []bool
}

func (l *leaderLog) Observe(e ax.Event) {
	if e.Kind != ax.EventLeaderChanged {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e.Leader)
}

// leader reports the latest leadership this host announced.
func (l *leaderLog) leader() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events) > 0 && l.events[len(l.events)-1]
}

func (l *leaderLog) all() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]bool(nil), l.events...)
}

// host is one Scheduler of a test cluster sharing a memstore.
type host struct {
	s   *ax.Scheduler
	st  *countingStore
	log *leaderLog
}

const testLeaderTTL = 3 * time.Second

// newHost returns a started Scheduler named node on shared, with a
// LeaderTTL of 3s (ticks every 1s) and a RescueInterval of 500ms.
func newHost(t *testing.T, shared *memstore.Store, node string, edit ...func(*ax.Config)) *host {
	t.Helper()
	h := &host{st: &countingStore{Store: shared}, log: &leaderLog{}}
	h.s = newScheduler(t, h.st, append([]func(*ax.Config){func(c *ax.Config) {
		c.Node = node
		c.LeaderTTL = testLeaderTTL
		c.RescueInterval = 500 * time.Millisecond
		c.Observers = []ax.Observer{h.log}
	}}, edit...)...)
	start(t, h.s)
	return h
}

func stopHost(t *testing.T, h *host) {
	t.Helper()
	require.NoError(t, h.s.Stop(context.Background()))
}

// TestLeaderElectsExactlyOne runs two Schedulers on one store: exactly one
// becomes leader, stays leader while it runs, and is the only one that runs
// the pruner; both run the rescuer, which needs no leader.
func TestLeaderElectsExactlyOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := memstore.New()
		a := newHost(t, shared, "a")
		b := newHost(t, shared, "b")
		time.Sleep(70 * time.Second) // past the first prune tick (every minute)
		synctest.Wait()

		la, lb := a.log.all(), b.log.all()
		require.Len(t, append(la, lb...), 1, "one leadership change in all: a=%v b=%v", la, lb)
		leader, follower := a, b
		if len(lb) == 1 {
			leader, follower = b, a
		}
		require.True(t, leader.log.leader())
		require.Positive(t, leader.st.prunes.Load(), "the leader never ran the pruner")
		require.Zero(t, follower.st.prunes.Load(), "a follower ran the pruner")
		require.Positive(t, leader.st.rescues.Load(), "the leader never ran the rescuer")
		require.Positive(t, follower.st.rescues.Load(), "a follower never ran the rescuer")

		nodes, err := follower.s.Nodes(t.Context())
		require.NoError(t, err)
		require.Len(t, nodes, 2)
		for _, n := range nodes {
			require.Equal(t, n.Name == leader.s.Node(), n.Leader, "node %s", n.Name)
		}
	})
}

// TestLeaderGracefulStopHandsOver stops the leader: it releases the lease,
// and the follower takes over at its next try (within LeaderTTL/3), not
// after the TTL. A job whose owner died is rescued meanwhile by whichever
// host runs the rescuer first: rescue needs no leader.
func TestLeaderGracefulStopHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := memstore.New()
		a := newHost(t, shared, "a")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.True(t, a.log.leader(), "the only host is not leader")
		b := newHost(t, shared, "b")
		time.Sleep(2 * testLeaderTTL)
		synctest.Wait()
		require.False(t, b.log.leader())

		// A job whose owner died: claimed with a short lease by a node
		// that never heartbeats.
		ctx := t.Context()
		id := scheduleOrphan(t, shared, "orphan")

		stopped := time.Now()
		stopHost(t, a)
		require.Equal(t, []bool{true, false}, a.log.all())
		for !b.log.leader() {
			time.Sleep(10 * time.Millisecond)
		}
		took := time.Since(stopped)
		t.Logf("leadership handed over %s after the leader's Stop (LeaderTTL %s)", took, testLeaderTTL)
		require.LessOrEqual(t, took, testLeaderTTL/3+100*time.Millisecond, "hand-over waited for the TTL")

		// The orphan was rescued within a rescue interval (+20% jitter) of
		// its lease's expiry (b has no handler for the kind, so the job
		// stays retrying).
		time.Sleep(600 * time.Millisecond)
		synctest.Wait()
		rec, err := shared.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateRetrying, rec.State)
		require.Positive(t, b.st.rescues.Load())
	})
}

// scheduleOrphan inserts a job of kind and claims it for a node that then
// vanishes, with a lease that is already expired by the time anyone looks.
func scheduleOrphan(t *testing.T, st *memstore.Store, kind string) uuid.UUID {
	t.Helper()
	ctx := t.Context()
	jobID := uuid.Must(uuid.NewV7())
	_, err := st.Insert(ctx, []store.InsertParams{{ID: jobID, Kind: kind, Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3}})
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "vanished", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}}, Limit: 1, LeaseDuration: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	time.Sleep(2 * time.Millisecond)
	return jobID
}

// TestLeaderLeaderlessStore runs maintenance on every host when the store
// cannot elect a leader.
func TestLeaderLeaderlessStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := memstore.New()
		var counts [2]*countingStore
		for i := range counts {
			counts[i] = &countingStore{Store: shared}
			s := newScheduler(t, plainStore{counts[i]}, func(c *ax.Config) { c.RescueInterval = 500 * time.Millisecond })
			start(t, s)
			_, err := s.Nodes(t.Context())
			require.ErrorIs(t, err, errors.ErrUnsupported)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for _, c := range counts {
			require.Positive(t, c.rescues.Load())
		}
	})
}

// plainStore hides every optional interface of the store it wraps.
type plainStore struct{ store.Store }

// TestLeaderStepsDownWhenStoreUnreachable cuts the leader off from the
// store: once its lease could have expired it stops acting as leader (no
// more pruning), and it leads again when the store is back.
func TestLeaderStepsDownWhenStoreUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newHost(t, memstore.New(), "a")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.True(t, a.log.leader())

		a.st.down.Store(true)
		cutAt := time.Now()
		for a.log.leader() {
			time.Sleep(10 * time.Millisecond)
		}
		lapsed := time.Since(cutAt)
		require.GreaterOrEqual(t, lapsed, testLeaderTTL-testLeaderTTL/3, "stepped down before the lease could lapse")
		require.LessOrEqual(t, lapsed, testLeaderTTL+testLeaderTTL/3, "kept leading past the lease")
		synctest.Wait()
		before := a.st.prunes.Load()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.Equal(t, before, a.st.prunes.Load(), "a host that lost its lease went on pruning")

		a.st.down.Store(false)
		time.Sleep(testLeaderTTL / 3)
		synctest.Wait()
		require.Equal(t, []bool{true, false, true}, a.log.all())
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Greater(t, a.st.prunes.Load(), before)
	})
}

// TestLeaderThroughASlowStore: a store that takes longer than the tick
// interval (LeaderTTL/3) to answer a leadership call, but less than half
// of LeaderTTL, still lets a host take the leadership and keep it: the
// call may run until the leadership held, or the one taken, would lapse
// (keepAliveTimeout). Bounded by the interval, every call timed out: the
// leader stepped down once its lease lapsed, and no host could take it.
func TestLeaderThroughASlowStore(t *testing.T) {
	for _, tc := range []struct {
		name      string
		slowFirst bool // the store is slow before the host starts
	}{
		{"renews", false},
		{"takes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &host{st: &countingStore{Store: memstore.New()}, log: &leaderLog{}}
				const slow = testLeaderTTL * 2 / 5 // 1.2 s: above the 1 s interval, below half the TTL
				if tc.slowFirst {
					h.st.slow.Store(int64(slow))
				}
				h.s = newScheduler(t, h.st, func(c *ax.Config) {
					c.Node = "a"
					c.LeaderTTL = testLeaderTTL
					c.Observers = []ax.Observer{h.log}
				})
				start(t, h.s)
				defer stopHost(t, h)
				time.Sleep(slow + time.Millisecond)
				synctest.Wait()
				require.True(t, h.log.leader(), "not leader")
				h.st.slow.Store(int64(slow))
				before := h.st.prunes.Load()
				time.Sleep(2 * time.Minute)
				synctest.Wait()
				require.Equal(t, []bool{true}, h.log.all(), "leadership changes")
				require.Greater(t, h.st.prunes.Load(), before, "the leader stopped pruning")
			})
		})
	}
}
