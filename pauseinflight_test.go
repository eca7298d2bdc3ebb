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

// heldClaimStore is a memstore whose first claim waits, once it was
// called, until the test lets it go: a claim in flight, as the first claim
// after Start is on PostgreSQL while it prepares its statements.
type heldClaimStore struct {
	*memstore.Store
	once    sync.Once
	entered chan struct{} // closed when the first claim is called
	release chan struct{} // closed by the test to let it run
}

func (h *heldClaimStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.Store.Claim(ctx, p)
}

// TestSchedulerAdminPauseStopsClaimInFlight pauses a kind through the
// running Scheduler's own Admin while the first claim after Start is in
// flight, then schedules a due job of the kind: the claim, let go only
// then, takes the job, and the host must hand it back unstarted rather
// than run it (issue 23, defect 6), with or without direct start.
func TestSchedulerAdminPauseStopsClaimInFlight(t *testing.T) {
	for _, tc := range []struct {
		name          string
		disableDirect bool
	}{
		{name: "direct start", disableDirect: false},
		{name: "no direct start", disableDirect: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &heldClaimStore{Store: memstore.New(), entered: make(chan struct{}), release: make(chan struct{})}
			ran := make(chan struct{}, 1)
			s := newScheduler(t, st, func(c *ax.Config) {
				c.DisableDirectStart = tc.disableDirect
				c.PollInterval = time.Hour // claims come from wake-ups only
				c.HeartbeatInterval = time.Hour
				c.LeaseDuration = 3 * time.Hour
			})
			require.NoError(t, s.Handle("paused.kind", ax.HandlerFunc(func(context.Context, *ax.Job) error {
				ran <- struct{}{}
				return nil
			})))
			start(t, s)
			recv(t, st.entered)

			ctx := t.Context()
			_, err := s.Admin().PauseKind(ctx, "paused.kind")
			require.NoError(t, err)
			res, err := s.Schedule(ctx, "paused.kind", nil)
			require.NoError(t, err)
			close(st.release)

			// The claim takes the job (the store does not refuse paused
			// kinds); wait until it came back from this host's hands.
			waitFor(t, "job claimed and then handed back or finished", func() bool {
				rec, err := st.Get(ctx, res.ID)
				return err == nil && rec.Fence > 0 && rec.State != ax.StateRunning
			})
			rec, err := st.Get(ctx, res.ID)
			require.NoError(t, err)
			require.Equal(t, ax.StateScheduled, rec.State, "a job of a kind paused here must not start here")
			require.Zero(t, rec.Attempt, "the hand-back gives the attempt back")
			select {
			case <-ran:
				t.Fatal("the handler ran a job of a kind paused on this host before it was scheduled")
			default:
			}
		})
	}
}

// heldInsertStore is a memstore whose InsertClaimed (a direct start)
// waits, once called, until the test lets it go.
type heldInsertStore struct {
	*memstore.Store
	entered chan struct{}
	release chan struct{}
}

func (h *heldInsertStore) InsertClaimed(ctx context.Context, p *store.InsertParams, c *store.InsertClaim) (store.InsertResult, *store.JobRecord, error) {
	close(h.entered)
	<-h.release
	return h.Store.InsertClaimed(ctx, p, c)
}

// TestSchedulerAdminPauseStopsDirectStartInFlight pauses a kind through
// the Scheduler's own Admin while a Schedule of the kind is inserting its
// job claimed for a direct start: once the pause returned, the job must
// not start here; it is handed back and waits.
func TestSchedulerAdminPauseStopsDirectStartInFlight(t *testing.T) {
	st := &heldInsertStore{Store: memstore.New(), entered: make(chan struct{}), release: make(chan struct{})}
	ran := make(chan struct{}, 1)
	s := newScheduler(t, st, func(c *ax.Config) {
		c.PollInterval = time.Hour
		c.HeartbeatInterval = time.Hour
		c.LeaseDuration = 3 * time.Hour
	})
	require.NoError(t, s.Handle("paused.kind", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran <- struct{}{}
		return nil
	})))
	start(t, s)
	ctx := t.Context()
	type result struct {
		res ax.ScheduleResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Schedule(ctx, "paused.kind", nil)
		done <- result{res, err}
	}()
	recv(t, st.entered)
	_, err := s.Admin().PauseKind(ctx, "paused.kind")
	require.NoError(t, err)
	close(st.release)
	r := recv(t, done)
	require.NoError(t, r.err)

	rec, err := st.Get(ctx, r.res.ID)
	require.NoError(t, err)
	require.Equal(t, ax.StateScheduled, rec.State, "a job of a kind paused here must not start here")
	require.Equal(t, int64(1), rec.Fence, "the job was inserted claimed")
	require.Zero(t, rec.Attempt)
	select {
	case <-ran:
		t.Fatal("the handler ran a job of a kind paused on this host")
	default:
	}
}
