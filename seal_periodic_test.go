package ax_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/sealtest"
	"github.com/axsched/ax/store"
)

// TestEncryptedSchedule: a periodic schedule's stored template is sealed
// for the schedule, so a job Admin.TriggerSchedule inserts under an ID of
// its own opens, as do the schedule's own ticks.
func TestEncryptedSchedule(t *testing.T) {
	k, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	keys := sealtest.Ring(t, k)
	st := newMemstore()
	s := newScheduler(t, st, func(c *ax.Config) { c.Keys, c.Logger = keys, zap.NewNop() })
	got := make(chan string, 10)
	require.NoError(t, ax.Handle(s, "nightly", func(_ context.Context, j *ax.Job, p struct{ Team string }) error {
		got <- p.Team + "/" + j.Metadata["token"]
		return nil
	}))
	require.NoError(t, s.Every("nightly", "0 3 * * *", struct{ Team string }{"ops"},
		ax.SecretMetadata(map[string]string{"token": "t0k"})))
	start(t, s)
	var sc ax.Schedule
	require.Eventually(t, func() bool {
		scs, err := s.Admin().Schedules(context.Background())
		require.NoError(t, err)
		if len(scs) == 1 && scs[0].Job != nil {
			sc = scs[0]
			return true
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	require.True(t, ax.IsSealed(sc.Job.Payload), "%s", sc.Job.Payload)
	require.True(t, ax.IsSealed(sc.Job.Metadata["token"]))

	res, err := s.Admin().TriggerSchedule(context.Background(), "nightly")
	require.NoError(t, err)
	require.Equal(t, "ops/t0k", recv(t, got))
	rec := waitState(t, st, res.ID, store.StateSucceeded)
	require.True(t, ax.IsSealed(rec.Payload))
}
