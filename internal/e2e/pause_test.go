package e2e_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// claimCountingStore counts the claims begun and ended on a pgstore, so
// that a test can wait for every claim in flight at a moment to return.
type claimCountingStore struct {
	*pgstore.Store
	begun, ended atomic.Int64
}

func (c *claimCountingStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	c.begun.Add(1)
	defer c.ended.Add(1)
	return c.Store.Claim(ctx, p)
}

// TestPGPauseThroughOwnAdminRightAfterStart (issue 23, defect 6): a kind
// paused through a running Scheduler's own Admin right after Start is no
// longer started on that host from the call on, with or without direct
// start: a due job of the kind scheduled after the pause returned is not
// running or finished once every claim in flight at its Schedule has
// returned. Before the fix the first claim after Start, slow on a fresh
// connection, took and started it in most runs.
func TestPGPauseThroughOwnAdminRightAfterStart(t *testing.T) {
	for _, disableDirect := range []bool{false, true} {
		for range 2 {
			pg, _ := newPG(t)
			st := &claimCountingStore{Store: pg}
			var ran atomic.Int64
			s := newScheduler(t, st, func(c *ax.Config) {
				c.DisableDirectStart = disableDirect
				c.LeaseDuration = 3 * time.Minute
				c.HeartbeatInterval = time.Minute // the host's own pause, not a re-read, must hold
			})
			require.NoError(t, s.Handle("pause.e2e", ax.HandlerFunc(func(context.Context, *ax.Job) error {
				ran.Add(1)
				return nil
			})))
			ctx := t.Context()
			require.NoError(t, s.Start(ctx))
			_, err := s.Admin().PauseKind(ctx, "pause.e2e")
			require.NoError(t, err)
			res, err := s.Schedule(ctx, "pause.e2e", nil)
			require.NoError(t, err)
			// Wait for every claim in flight to return and for the job
			// to leave running, if one took it (a hand-back follows the
			// claim's return).
			inFlight := st.begun.Load()
			deadline := time.Now().Add(20 * time.Second)
			var rec *ax.JobRecord
			for {
				rec, err = s.Get(ctx, res.ID)
				require.NoError(t, err)
				if st.ended.Load() >= inFlight && rec.State != ax.StateRunning {
					break
				}
				require.False(t, time.Now().After(deadline), "claims in flight did not return, or the job stayed running")
				time.Sleep(time.Millisecond)
			}
			require.Equal(t, ax.StateScheduled, rec.State, "direct start off: %v", disableDirect)
			require.Zero(t, ran.Load(), "direct start off: %v", disableDirect)
			require.NoError(t, s.Stop(ctx))
		}
	}
}
