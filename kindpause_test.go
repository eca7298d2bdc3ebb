package ax_test

import (
	"context"
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

// pauseWatchStore is a memstore that counts the reads of the paused kinds
// and the claims, so that tests can wait for "the host re-read the
// paused set" or "the host ran claim rounds" instead of sleeping.
type pauseWatchStore struct {
	*memstore.Store
	kindReads atomic.Int64
	claims    atomic.Int64
}

func (c *pauseWatchStore) KindStates(ctx context.Context) ([]store.KindState, error) {
	defer c.kindReads.Add(1)
	return c.Store.KindStates(ctx)
}

func (c *pauseWatchStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	defer c.claims.Add(1)
	return c.Store.Claim(ctx, p)
}

// waitGrowth waits until n has grown by at least by from now.
func waitGrowth(t *testing.T, n *atomic.Int64, by int64, what string) {
	t.Helper()
	waitAtLeast(t, n, n.Load()+by, what)
}

// waitAtLeast waits until n is at least target.
func waitAtLeast(t *testing.T, n *atomic.Int64, target int64, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for n.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", what, n.Load(), target)
		}
		time.Sleep(time.Millisecond)
	}
}

// requireStates requires every job in ids to be in want.
func requireStates(t *testing.T, st store.Store, ids []uuid.UUID, want ax.State) {
	t.Helper()
	for _, id := range ids {
		rec, err := st.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, want, rec.State, "job %s", id)
	}
}

// TestPauseKind pauses a kind from another process's Admin while two of
// its jobs run and more are due: the running ones finish, none starts
// while the kind is paused (watched over three re-reads of the paused
// set after the host first read it), and all run after the resume.
func TestPauseKind(t *testing.T) {
	st := &pauseWatchStore{Store: memstore.New()}
	operator := newAdmin(t, st)
	release := make(chan struct{})
	var started atomic.Int64
	s := newScheduler(t, st, func(c *ax.Config) {
		c.LeaseDuration = 300 * time.Millisecond // re-read every 100ms
		c.PollInterval = 20 * time.Millisecond
	})
	require.NoError(t, s.Handle("pk", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		started.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})))
	// Another kind keeps the claim rounds going while "pk" is paused.
	require.NoError(t, s.Handle("pk.other", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	ctx := t.Context()
	var running []uuid.UUID
	for range 2 {
		res, err := s.Schedule(ctx, "pk", nil)
		require.NoError(t, err)
		running = append(running, res.ID)
	}
	start(t, s)
	for _, id := range running {
		waitState(t, st, id, ax.StateRunning)
	}

	ks, err := operator.PauseKind(ctx, "pk")
	require.NoError(t, err)
	require.True(t, ks.Paused)
	// Three reads: the third begins only once the second, which began
	// after the pause, was applied.
	waitGrowth(t, &st.kindReads, 3, "paused-kind reads after the pause")

	var waiting []uuid.UUID
	for range 5 {
		res, err := s.Schedule(ctx, "pk", nil)
		require.NoError(t, err)
		waiting = append(waiting, res.ID)
	}
	close(release) // the running attempts finish; their slots free up
	for _, id := range running {
		waitState(t, st, id, ax.StateSucceeded)
	}
	claims := st.claims.Load()
	waitGrowth(t, &st.kindReads, 3, "paused-kind reads while paused")
	require.Greater(t, st.claims.Load(), claims, "the host kept claiming other kinds' jobs")
	require.Equal(t, int64(2), started.Load(), "an attempt started while the kind was paused")
	requireStates(t, st, waiting, ax.StateScheduled)

	ks, err = operator.ResumeKind(ctx, "pk")
	require.NoError(t, err)
	require.False(t, ks.Paused)
	for _, id := range waiting {
		waitState(t, st, id, ax.StateSucceeded)
	}
	require.Equal(t, int64(7), started.Load())
}

// TestResumeWakesAtOnce starts a host while a kind is paused, with a
// minute-long poll and heartbeat: the host never claims the kind, and a
// resume from another process makes it claim at once, through the
// store's empty-kind notification rather than its next poll or read.
func TestResumeWakesAtOnce(t *testing.T) {
	st := &pauseWatchStore{Store: memstore.New()}
	operator := newAdmin(t, st)
	ctx := t.Context()
	_, err := operator.PauseKind(ctx, "rw")
	require.NoError(t, err)
	ran := make(chan struct{}, 1)
	s := newScheduler(t, st, func(c *ax.Config) {
		c.LeaseDuration = 3 * time.Minute // re-read every minute
		c.PollInterval = time.Minute
	})
	require.NoError(t, s.Handle("rw", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran <- struct{}{}
		return nil
	})))
	// Another kind makes the first claim round reach the store.
	require.NoError(t, s.Handle("rw.other", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	res, err := s.Schedule(ctx, "rw", nil)
	require.NoError(t, err)
	start(t, s)
	require.Positive(t, st.kindReads.Load(), "Start read the paused kinds")
	waitAtLeast(t, &st.claims, 1, "first claim round")
	requireStates(t, st, []uuid.UUID{res.ID}, ax.StateScheduled)

	_, err = operator.ResumeKind(ctx, "rw")
	require.NoError(t, err)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed kind was not claimed within 10s (poll and re-read are a minute)")
	}
}

// TestPauseFromAnotherProcessAtOnce pauses a kind from another process's
// Admin (the ax command) while a host runs with a minute between its
// reads of the paused set: the store's empty-kind notification makes it
// re-read at once, so a job of the kind scheduled next does not start
// (issue 40: it started when due within the host's next heartbeat).
func TestPauseFromAnotherProcessAtOnce(t *testing.T) {
	st := &pauseWatchStore{Store: memstore.New()}
	operator := newAdmin(t, st)
	ran := make(chan struct{}, 1)
	s := newScheduler(t, st, func(c *ax.Config) {
		c.LeaseDuration = 3 * time.Minute // re-read every minute
		c.PollInterval = 10 * time.Millisecond
	})
	require.NoError(t, s.Handle("ap", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran <- struct{}{}
		return nil
	})))
	require.NoError(t, s.Handle("ap.other", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	start(t, s)
	ctx := t.Context()
	reads := st.kindReads.Load()
	_, err := operator.PauseKind(ctx, "ap")
	require.NoError(t, err)
	waitAtLeast(t, &st.kindReads, reads+1, "the host re-read the paused kinds on the pause's notification")
	res, err := s.Schedule(ctx, "ap", nil)
	require.NoError(t, err)
	waitGrowth(t, &st.claims, 3, "claim rounds while paused")
	requireStates(t, st, []uuid.UUID{res.ID}, ax.StateScheduled)
	select {
	case <-ran:
		t.Fatal("a job of the paused kind ran")
	default:
	}
}

// TestSchedulerAdminPausesLocallyAtOnce pauses and resumes through the
// running Scheduler's own Admin: the host applies both without waiting
// for its next read of the paused set (a minute away here).
func TestSchedulerAdminPausesLocallyAtOnce(t *testing.T) {
	st := &pauseWatchStore{Store: memstore.New()}
	ran := make(chan struct{}, 1)
	s := newScheduler(t, st, func(c *ax.Config) {
		c.LeaseDuration = 3 * time.Minute
		c.PollInterval = 10 * time.Millisecond
	})
	require.NoError(t, s.Handle("local", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran <- struct{}{}
		return nil
	})))
	require.NoError(t, s.Handle("local.other", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	start(t, s)
	ctx := t.Context()
	_, err := s.Admin().PauseKind(ctx, "local")
	require.NoError(t, err)
	res, err := s.Schedule(ctx, "local", nil)
	require.NoError(t, err)
	waitGrowth(t, &st.claims, 3, "claim rounds while paused")
	requireStates(t, st, []uuid.UUID{res.ID}, ax.StateScheduled)

	_, err = s.Admin().ResumeKind(ctx, "local")
	require.NoError(t, err)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed kind was not claimed")
	}
}

// TestAdminKinds lists kinds known from jobs, nodes and pauses, and
// refuses bad kind names.
func TestAdminKinds(t *testing.T) {
	st := newMemstore()
	a := newAdmin(t, st)
	ctx := t.Context()
	s := newScheduler(t, st, func(c *ax.Config) { c.Node = "host-1" })
	require.NoError(t, s.Handle("k.handled", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	_, err := s.Schedule(ctx, "k.jobs", nil, ax.In(time.Hour))
	require.NoError(t, err)
	_, err = a.PauseKind(ctx, "k.paused")
	require.NoError(t, err)
	start(t, s)
	waitFor(t, "node registered", func() bool {
		nodes, err := a.Nodes(ctx)
		return err == nil && len(nodes) == 1
	})

	kinds, err := a.Kinds(ctx)
	require.NoError(t, err)
	require.Len(t, kinds, 3)
	require.Equal(t, ax.KindState{Kind: "k.handled", Nodes: []string{"host-1"}}, kinds[0])
	require.Equal(t, ax.KindState{Kind: "k.jobs", Jobs: map[ax.State]int64{ax.StateScheduled: 1}}, kinds[1])
	require.Equal(t, "k.paused", kinds[2].Kind)
	require.True(t, kinds[2].Paused)
	require.False(t, kinds[2].UpdatedAt.IsZero())

	for _, bad := range []string{"", "a\x00b", string(make([]byte, store.MaxKindLength+1))} {
		_, err := a.PauseKind(ctx, bad)
		require.ErrorIs(t, err, ax.ErrInvalidKind)
		_, err = a.ResumeKind(ctx, bad)
		require.ErrorIs(t, err, ax.ErrInvalidKind)
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// slowKindsStore is a memstore whose reads of the kinds' states take
// slow nanoseconds (a loaded store), or until their context ends.
type slowKindsStore struct {
	*memstore.Store
	slow atomic.Int64
}

func (c *slowKindsStore) KindStates(ctx context.Context) ([]store.KindState, error) {
	if err := slowCall(ctx, time.Duration(c.slow.Load())); err != nil {
		return nil, err
	}
	return c.Store.KindStates(ctx)
}

// TestPausedKindsReadThroughASlowStore: a store that takes longer than
// HeartbeatInterval to read the paused kinds still tells the host of a
// pause, and the host starts none of the kind's jobs. Bounded by the
// interval, every read timed out and the host kept the set it read
// before the pause.
func TestPausedKindsReadThroughASlowStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowKindsStore{Store: memstore.New()}
		var ran atomic.Int64
		s := newScheduler(t, st, func(c *ax.Config) {
			c.LeaseDuration = 3 * time.Second // reads every second
		})
		require.NoError(t, s.Handle("ps", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			ran.Add(1)
			return nil
		})))
		start(t, s)
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		st.slow.Store(int64(1500 * time.Millisecond))
		_, err := st.SetKindPaused(t.Context(), "ps", true)
		require.NoError(t, err)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		res, err := s.Schedule(t.Context(), "ps", nil)
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.Zero(t, ran.Load(), "a job of the paused kind ran")
		requireStates(t, st, []uuid.UUID{res.ID}, ax.StateScheduled)
	})
}
