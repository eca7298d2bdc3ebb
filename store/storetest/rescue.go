package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// leaseExpiredError is the error text RescueExpired records.
const leaseExpiredError = "lease expired"

// testRescue checks RescueExpired.
func testRescue(t *testing.T, newStore NewStoreFunc) {
	t.Run("Outcomes", func(t *testing.T) {
		cases := []struct {
			name        string
			maxAttempts int
			wantState   store.State
			wantFinal   bool
		}{
			{"AttemptsLeftRetrying", 2, store.StateRetrying, false},
			{"LastAttemptDead", 1, store.StateDead, true},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				id := insertOne(t, st, "rescue", withMaxAttempts(c.maxAttempts))
				j := claimOnly(t, st, "rescue", id, shortLease)
				waitUntilStoreTime(t, st, j.LeaseExpiresAt)

				before := storeNow(t, st)
				rescued, err := st.RescueExpired(t.Context(), 10)
				require.NoError(t, err)
				require.Len(t, rescued, 1)
				after := storeNow(t, st)
				require.Equal(t, store.Rescued{ID: id, Kind: "rescue", Owner: owner, Attempt: 1, State: c.wantState}, rescued[0])

				got := get(t, st, id)
				require.Equal(t, c.wantState, got.State)
				require.Equal(t, 1, got.Attempt, "the expired attempt counts")
				requireLeaseCleared(t, got)
				require.Len(t, got.Errors, 1)
				require.Equal(t, 1, got.Errors[0].Attempt)
				require.Contains(t, got.Errors[0].Error, leaseExpiredError)
				requireBetween(t, before, after, got.Errors[0].At, "error time")
				require.Equal(t, owner, got.Errors[0].Node, "the node of the expired attempt")
				requireTimeNear(t, j.AttemptedAt, got.Errors[0].StartedAt, storedTolerance)
				require.Equal(t, c.wantFinal, !got.FinishedAt.IsZero(), "FinishedAt set only on dead")
				require.Equal(t, c.wantState.Claimable(), len(claim(t, st, claimParams(10, longLease, "rescue")).Jobs) == 1, "a retrying job is due at once")

				// Nothing left to rescue.
				rescued, err = st.RescueExpired(t.Context(), 10)
				require.NoError(t, err)
				require.Empty(t, rescued)
			})
		}
	})

	t.Run("Rescued", func(t *testing.T) {
		// What RescueExpired reports: for each job, the node whose lease
		// expired, the attempt cut short and where the job went.
		st := newStore(t)
		claimAs := func(t *testing.T, node, kind string, id uuid.UUID) *store.JobRecord {
			res := claim(t, st, &store.ClaimParams{Owner: node, Kinds: []store.KindLimit{{Kind: kind, Limit: 1}}, Limit: 1, LeaseDuration: shortLease})
			require.Equal(t, []uuid.UUID{id}, claimIDs(res))
			return res.Jobs[0]
		}
		cases := []struct {
			node        string
			kind        string
			maxAttempts int
			retries     int               // attempts failed before the one that expires
			requests    []store.ControlOp // made during the expiring attempt
			want        store.State
		}{
			{"node-a", "rescue.retrying", 3, 1, nil, store.StateRetrying},
			{"node-b", "rescue.dead", 1, 0, nil, store.StateDead},
			{"node-a", "rescue.cancelled", 3, 0, []store.ControlOp{store.OpCancel}, store.StateCancelled},
			{"node-b", "rescue.paused", 3, 0, []store.ControlOp{store.OpPause}, store.StatePaused},
			{"node-c", "rescue.last-paused", 2, 1, []store.ControlOp{store.OpPause}, store.StateDead},
		}
		var want []store.Rescued
		var latest time.Time
		for _, c := range cases {
			id := insertOne(t, st, c.kind, withMaxAttempts(c.maxAttempts))
			for range c.retries {
				j := claimOnly(t, st, c.kind, id, longLease)
				finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Error: "e"})
			}
			j := claimAs(t, c.node, c.kind, id)
			for _, op := range c.requests {
				control(t, st, id, op)
			}
			latest = maxTime(latest, j.LeaseExpiresAt)
			want = append(want, store.Rescued{ID: id, Kind: c.kind, Owner: c.node, Attempt: c.retries + 1, State: c.want})
		}
		waitUntilStoreTime(t, st, latest)
		rescued, err := st.RescueExpired(t.Context(), 10)
		require.NoError(t, err)
		require.ElementsMatch(t, want, rescued)
		for _, r := range want {
			got := get(t, st, r.ID)
			require.Equal(t, r.State, got.State, "job %s", r.Kind)
			require.Equal(t, r.Owner, got.Owner, "Owner keeps naming the node that last held the job")
		}
		rescue(t, st, 10, 0)
	})

	t.Run("RetryingIsDueNow", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "rescue", withMaxAttempts(3))
		j := claimOnly(t, st, "rescue", id, shortLease)
		waitUntilStoreTime(t, st, j.LeaseExpiresAt)
		rescue(t, st, 10, 1)
		got := get(t, st, id)
		require.Equal(t, store.StateRetrying, got.State)
		require.False(t, got.RunAt.After(storeNow(t, st)), "run_at %s is not due", got.RunAt)
		again := claimOnly(t, st, "rescue", id, longLease)
		require.Equal(t, 2, again.Attempt)
	})

	t.Run("CancelRequestedBecomesCancelled", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "rescue", withMaxAttempts(3), withUniqueKey("rescue-cancel"))
		j := claimOnly(t, st, "rescue", id, shortLease)
		control(t, st, id, store.OpCancel)
		waitUntilStoreTime(t, st, j.LeaseExpiresAt)
		rescue(t, st, 10, 1)
		got := get(t, st, id)
		require.Equal(t, store.StateCancelled, got.State, "a dead owner must not undo a user's cancel")
		require.False(t, got.FinishedAt.IsZero())
		// The cancelled job freed its unique key.
		res, err := st.Insert(ctxTimeout(t), []store.InsertParams{params(t, "rescue", withUniqueKey("rescue-cancel"))})
		require.NoError(t, err)
		require.False(t, res[0].Duplicate)
	})

	t.Run("UnexpiredUntouched", func(t *testing.T) {
		st := newStore(t)
		expiring := insertOne(t, st, "rescue.short")
		j := claimOnly(t, st, "rescue.short", expiring, shortLease)
		held := makeJob(t, st, store.StateRunning, "rescue.long")
		waitUntilStoreTime(t, st, j.LeaseExpiresAt)
		rescue(t, st, 10, 1)
		requireUnchanged(t, st, held)
		require.Equal(t, store.StateRetrying, get(t, st, expiring).State)
	})

	t.Run("OnlyRunningJobs", func(t *testing.T) {
		st := newStore(t)
		var before []*store.JobRecord
		for _, s := range []store.State{store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateSucceeded, store.StateDead, store.StateCancelled} {
			before = append(before, makeJob(t, st, s, "rescue."+string(s)))
		}
		past := insertOne(t, st, "rescue.past", withRunAt(storeNow(t, st).Add(-farFuture)))
		before = append(before, get(t, st, past))
		rescue(t, st, 100, 0)
		for _, j := range before {
			requireUnchanged(t, st, j)
		}
	})

	t.Run("Limit", func(t *testing.T) {
		st := newStore(t)
		ps := make([]store.InsertParams, 5)
		for i := range ps {
			ps[i] = params(t, "rescue")
		}
		insert(t, st, ps...)
		res := claim(t, st, claimParams(10, shortLease, "rescue"))
		require.Len(t, res.Jobs, 5)
		waitUntilStoreTime(t, st, res.Jobs[len(res.Jobs)-1].LeaseExpiresAt)
		steps := []struct{ limit, want int }{{2, 2}, {2, 2}, {10, 1}, {10, 0}}
		for _, s := range steps {
			rescue(t, st, s.limit, s.want)
		}
	})

	t.Run("InvalidLimit", func(t *testing.T) {
		for _, limit := range []int{0, -1} {
			st := newStore(t)
			id := insertOne(t, st, "rescue")
			j := claimOnly(t, st, "rescue", id, shortLease)
			waitUntilStoreTime(t, st, j.LeaseExpiresAt)
			before := get(t, st, id)
			_, err := st.RescueExpired(t.Context(), limit)
			require.ErrorIs(t, err, store.ErrInvalidParams, "limit %d", limit)
			requireUnchanged(t, st, before)
		}
	})

	t.Run("RaceWithFinish", func(t *testing.T) {
		// Owners finish jobs whose leases just expired while the rescuer
		// takes them back: each job goes exactly one way.
		st := newStore(t)
		ctx := ctxTimeout(t)
		const n = 200
		ps := make([]store.InsertParams, n)
		for i := range ps {
			ps[i] = params(t, "rescue.race")
		}
		insert(t, st, ps...)
		res := claim(t, st, claimParams(n, shortLease, "rescue.race"))
		require.Len(t, res.Jobs, n)
		latest := time.Time{}
		for _, j := range res.Jobs {
			latest = maxTime(latest, j.LeaseExpiresAt)
		}
		waitUntilStoreTime(t, st, latest)

		finished := make([]bool, n)
		var rescued int
		var finishErr, rescueErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			for i := 0; i < n; i += 10 {
				fps := make([]store.FinishParams, 0, 10)
				for _, j := range res.Jobs[i : i+10] {
					fps = append(fps, store.FinishParams{Lease: lease(j), Outcome: store.OutcomeSucceeded})
				}
				ok, err := st.Finish(ctx, fps)
				if err != nil {
					finishErr = err
					return
				}
				copy(finished[i:], ok)
			}
		})
		wg.Go(func() {
			<-start
			for {
				k, err := st.RescueExpired(ctx, 7)
				if err != nil {
					rescueErr = err
					return
				}
				if len(k) == 0 {
					return
				}
				rescued += len(k)
			}
		})
		close(start)
		wg.Wait()
		require.NoError(t, finishErr)
		require.NoError(t, rescueErr)

		wantState := map[bool]store.State{true: store.StateSucceeded, false: store.StateRetrying}
		var nFinished int
		for i, j := range res.Jobs {
			require.Equal(t, wantState[finished[i]], get(t, st, j.ID).State, "job %d", i)
			nFinished += boolInt(finished[i])
		}
		require.Equal(t, n, nFinished+rescued, "finished %d + rescued %d", nFinished, rescued)
	})

	t.Run("OldTokenFenced", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "rescue", withMaxAttempts(3))
		j := claimOnly(t, st, "rescue", id, shortLease)
		waitUntilStoreTime(t, st, j.LeaseExpiresAt)
		rescue(t, st, 10, 1)
		rescued := get(t, st, id)

		// Before a new claim: the zombie owner can neither finish nor extend.
		require.Equal(t, []bool{false}, finish(t, st, store.FinishParams{Lease: lease(j), Outcome: store.OutcomeSucceeded}))
		require.Equal(t, []store.Lease{lease(j)}, extend(t, st, longLease, lease(j)).Lost)
		requireUnchanged(t, st, rescued)

		// After a new claim: likewise, and the new holder is untouched.
		current := claimOnly(t, st, "rescue", id, longLease)
		held := get(t, st, id)
		require.Equal(t, []bool{false}, finish(t, st, store.FinishParams{Lease: lease(j), Outcome: store.OutcomeDead, Error: "zombie"}))
		require.Equal(t, []store.Lease{lease(j)}, extend(t, st, longLease, lease(j)).Lost)
		requireUnchanged(t, st, held)
		require.Equal(t, []bool{true}, finish(t, st, store.FinishParams{Lease: lease(current), Outcome: store.OutcomeSucceeded}))
	})
}

// rescue runs RescueExpired with limit and requires it rescued want jobs.
func rescue(t *testing.T, st store.Store, limit, want int) {
	t.Helper()
	rescued, err := st.RescueExpired(t.Context(), limit)
	require.NoError(t, err)
	require.Len(t, rescued, want, "RescueExpired(%d)", limit)
}

// boolInt returns 1 for true and 0 for false.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
