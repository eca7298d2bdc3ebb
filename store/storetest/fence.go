package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFence checks JobRecord.Fence: zero until the first claim, then one
// more with every claim and changed by nothing else, so it grows strictly
// with each attempt even where Attempt is given back (a snooze).
func testFence(t *testing.T, newStore NewStoreFunc) {
	t.Run("ZeroBeforeFirstClaim", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "fence", notDue)
		require.Zero(t, get(t, st, id).Fence)
		for _, op := range []store.ControlOp{store.OpPause, store.OpResume, store.OpRunNow, store.OpCancel, store.OpRunNow} {
			require.Zero(t, control(t, st, id, op).Fence, "after %s", op)
		}
		for _, state := range []store.State{store.StateScheduled, store.StatePaused, store.StateCancelled} {
			require.Zero(t, makeJob(t, st, state, "fence").Fence, "a %s job never claimed", state)
		}
	})

	t.Run("OneMoreEachClaim", func(t *testing.T) {
		// A claim adds one; nothing else moves the fence, even the
		// transitions that give the attempt back (snooze, release) or
		// reset it (RunNow of a dead or cancelled job).
		st := newStore(t)
		id := insertOne(t, st, "fence", withMaxAttempts(20))
		var (
			cur  *store.JobRecord // the latest claim
			want int64
		)
		claimIt := func(t *testing.T) {
			cur = claimOnly(t, st, "fence", id, longLease)
			want++
			require.Equal(t, want, cur.Fence, "Claim returned the wrong fence")
		}
		end := func(p store.FinishParams) func(t *testing.T) {
			return func(t *testing.T) { finishOne(t, st, cur, p) }
		}
		op := func(op store.ControlOp) func(t *testing.T) {
			return func(t *testing.T) { control(t, st, id, op) }
		}
		steps := []struct {
			name string
			do   func(t *testing.T)
		}{
			{"FirstClaim", claimIt},
			{"Retry", end(store.FinishParams{Outcome: store.OutcomeRetry, Error: "e"})},
			{"Claim", claimIt},
			{"Snooze", end(store.FinishParams{Outcome: store.OutcomeSnooze})},
			{"ClaimSnoozed", claimIt},
			{"Release", end(store.FinishParams{Outcome: store.OutcomeRelease})},
			{"ClaimReleased", claimIt},
			{"PauseRunning", op(store.OpPause)},
			{"ReleasePaused", end(store.FinishParams{Outcome: store.OutcomeRelease})},
			{"RunNowPaused", op(store.OpRunNow)},
			{"ClaimRunNow", claimIt},
			{"Dead", end(store.FinishParams{Outcome: store.OutcomeDead, Error: "e"})},
			{"RunNowDead", op(store.OpRunNow)},
			{"ClaimAfterReset", claimIt},
			{"CancelRunning", op(store.OpCancel)},
			{"RetryCancelled", end(store.FinishParams{Outcome: store.OutcomeRetry, Error: "e"})},
			{"RunNowCancelled", op(store.OpRunNow)},
			{"ClaimThenRescue", func(t *testing.T) {
				cur = claimOnly(t, st, "fence", id, shortLease)
				want++
				waitUntilStoreTime(t, st, cur.LeaseExpiresAt)
				rescue(t, st, 10, 1)
			}},
			{"ClaimRescued", claimIt},
		}
		for _, s := range steps {
			t.Run(s.name, func(t *testing.T) {
				s.do(t)
				got := get(t, st, id)
				require.Equal(t, want, got.Fence)
			})
		}
		got := get(t, st, id)
		require.Greater(t, got.Fence, int64(got.Attempt), "the attempt was given back; the fence was not")
	})

	t.Run("ClaimsOfManyJobs", func(t *testing.T) {
		st := newStore(t)
		ps := make([]store.InsertParams, 5)
		for i := range ps {
			ps[i] = params(t, "fence.many")
		}
		insert(t, st, ps...)
		res := claim(t, st, claimParams(10, longLease, "fence.many"))
		require.Len(t, res.Jobs, len(ps))
		for _, j := range res.Jobs {
			require.Equal(t, int64(1), j.Fence, "job %s", j.ID)
			requireSameRecord(t, j, get(t, st, j.ID))
		}
	})
}
