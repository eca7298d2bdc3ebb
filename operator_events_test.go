package ax_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// eventLog records the events of some kinds.
type eventLog struct {
	kinds map[ax.EventKind]bool
	mu    sync.Mutex
	got   []ax.Event
	ch    chan struct{}
}

func newEventLog(kinds ...ax.EventKind) *eventLog {
	l := &eventLog{kinds: make(map[ax.EventKind]bool), ch: make(chan struct{}, 1)}
	for _, k := range kinds {
		l.kinds[k] = true
	}
	return l
}

func (l *eventLog) Observe(e ax.Event) {
	if !l.kinds[e.Kind] {
		return
	}
	l.mu.Lock()
	l.got = append(l.got, e)
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

func (l *eventLog) events() []ax.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ax.Event(nil), l.got...)
}

// TestEventRescued lets a dead owner's lease expire: the host that takes
// the job back emits one EventRescued naming the owner and the state the
// job went to.
func TestEventRescued(t *testing.T) {
	st := newMemstore()
	ctx := t.Context()
	log := newEventLog(ax.EventRescued)
	s := newScheduler(t, st, func(c *ax.Config) {
		c.Node = "rescuer"
		c.RescueInterval = 20 * time.Millisecond
		c.Observers = []ax.Observer{log}
	})
	res, err := s.Schedule(ctx, "orphan", nil, ax.MaxAttempts(3))
	require.NoError(t, err)
	claimed, err := st.Claim(ctx, &store.ClaimParams{Owner: "ghost", Limit: 1, LeaseDuration: 20 * time.Millisecond,
		Kinds: []store.KindLimit{{Kind: "orphan", Limit: 1}}})
	require.NoError(t, err)
	require.Len(t, claimed.Jobs, 1)
	start(t, s)
	recv(t, log.ch)
	got := log.events()
	require.Len(t, got, 1)
	e := got[0]
	require.Equal(t, res.ID, e.JobID)
	require.Equal(t, "orphan", e.JobKind)
	require.Equal(t, "ghost", e.Owner)
	require.Equal(t, "rescuer", e.Node)
	require.Equal(t, 1, e.Attempt)
	require.Equal(t, ax.StateRetrying, e.State)
	require.Equal(t, "rescued", e.Kind.String())
}

// TestEventHandedBack stops a host whose handler outlives Stop's
// deadline: the job handed back emits EventHandedBack before Stop
// returns.
func TestEventHandedBack(t *testing.T) {
	st := newMemstore()
	ctx := t.Context()
	log := newEventLog(ax.EventHandedBack)
	started := make(chan struct{})
	s := newScheduler(t, st, func(c *ax.Config) { c.Observers = []ax.Observer{log} })
	require.NoError(t, s.Handle("long", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})))
	res, err := s.Schedule(ctx, "long", nil, ax.Metadata(map[string]string{"tenant": "t1"}))
	require.NoError(t, err)
	start(t, s)
	recv(t, started)
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Stop(stopCtx), context.DeadlineExceeded)
	got := log.events()
	require.Len(t, got, 1)
	require.Equal(t, res.ID, got[0].JobID)
	require.Equal(t, "long", got[0].JobKind)
	require.Equal(t, map[string]string{"tenant": "t1"}, got[0].Metadata)
	require.Equal(t, "handed_back", got[0].Kind.String())
	rec, err := st.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, ax.StateScheduled, rec.State)
}

// TestAdminLeaderWithoutScheduler reads the nodes and the leader from a
// process that runs no Scheduler, through a leadership's whole life.
func TestAdminLeaderWithoutScheduler(t *testing.T) {
	st := newMemstore()
	a := newAdmin(t, st)
	ctx := t.Context()
	l, err := a.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, ax.Leader{}, *l, "nobody ever led")

	s := newScheduler(t, st, func(c *ax.Config) { c.Node = "only" })
	start(t, s)
	waitFor(t, "leader elected", func() bool {
		l, err := a.Leader(ctx)
		return err == nil && l.Node == "only"
	})
	l, err = a.Leader(ctx)
	require.NoError(t, err)
	require.Positive(t, l.Term)
	require.False(t, l.ExpiresAt.IsZero())
	nodes, err := a.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	require.True(t, nodes[0].Leader)

	require.NoError(t, s.Stop(ctx))
	after, err := a.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, ax.Leader{Term: l.Term}, *after, "released at Stop")
	nodes, err = a.Nodes(ctx)
	require.NoError(t, err)
	require.Equal(t, ax.NodeStopped, nodes[0].State)
	require.False(t, nodes[0].Leader)
}

// TestStatsOldestDue reads the age of the oldest due job of a kind no
// host runs.
func TestStatsOldestDue(t *testing.T) {
	clock := &frozenClock{at: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := newMemstore(memstore.WithClock(clock.Now))
	s := newScheduler(t, st)
	_, err := s.Schedule(t.Context(), "stalled", nil)
	require.NoError(t, err)
	_, err = s.Schedule(t.Context(), "future", nil, ax.In(time.Hour))
	require.NoError(t, err)
	clock.Set(clock.Now().Add(90 * time.Second))
	stats, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.True(t, stats.OldestDueKnown)
	require.Equal(t, 90*time.Second, stats.DueAge("stalled"))
	require.Zero(t, stats.DueAge("future"))
	require.NotContains(t, stats.OldestDue, "future")
}
