package storetest

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// finishClaim calls FinishClaim and requires success.
func finishClaim(t *testing.T, st store.Store, fin []store.FinishParams, p *store.ClaimParams) (*store.FinishResult, *store.ClaimResult) {
	t.Helper()
	fr, res, err := as[store.FinishClaimer](t, st).FinishClaim(t.Context(), fin, p)
	require.NoError(t, err)
	require.NotNil(t, fr)
	require.NotNil(t, res)
	require.Len(t, fr.OK, len(fin))
	require.False(t, res.Now.IsZero(), "ClaimResult.Now is zero")
	return fr, res
}

// testFinishClaim checks the optional FinishClaimer: it is Finish then
// Claim, the claim seeing the outcomes, on the one-trip path (plain
// outcomes of kinds without flow settings) and on the paths a store may
// take apart (results, flow settings); invalid rows or claims change
// nothing.
func testFinishClaim(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FinishClaimer](t, newStore)

	// running inserts n due jobs of kind, claims them, and returns them.
	running := func(t *testing.T, st store.Store, kind string, n int) []*store.JobRecord {
		t.Helper()
		for range n {
			insertOne(t, st, kind)
		}
		res := claim(t, st, claimParams(n, longLease, kind))
		require.Len(t, res.Jobs, n)
		return res.Jobs
	}

	t.Run("WritesThenClaims", func(t *testing.T) {
		cases := []struct {
			name    string
			outcome store.Outcome
			want    store.State
			// again: the claim takes the finished job back (due at once).
			again bool
		}{
			{"Succeeded", store.OutcomeSucceeded, store.StateSucceeded, false},
			{"Dead", store.OutcomeDead, store.StateDead, false},
			{"Cancelled", store.OutcomeCancelled, store.StateCancelled, false},
			{"RetryDueAtOnce", store.OutcomeRetry, store.StateRunning, true},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				done := running(t, st, "k", 2)
				waiting := insertOne(t, st, "k")
				other := insertOne(t, st, "other")
				fin := []store.FinishParams{
					{Lease: lease(done[0]), Outcome: c.outcome, Error: "e"},
					{Lease: lease(done[1]), Outcome: store.OutcomeSucceeded},
				}
				fr, res := finishClaim(t, st, fin, claimParams(10, longLease, "k"))
				require.Equal(t, []bool{true, true}, fr.OK)
				want := []uuid.UUID{waiting}
				if c.again {
					want = append(want, done[0].ID)
				}
				require.ElementsMatch(t, want, claimIDs(res), "claimed")
				for _, j := range res.Jobs {
					require.Equal(t, store.StateRunning, j.State)
					require.NotEqual(t, done[0].LeaseToken, j.LeaseToken)
					requireSameRecord(t, get(t, st, j.ID), j)
				}
				got := get(t, st, done[0].ID)
				require.Equal(t, c.want, got.State)
				if c.want.Final() {
					require.False(t, res.Now.Before(got.FinishedAt), "the claim's now %s is before the outcome's %s", res.Now, got.FinishedAt)
				}
				if c.again {
					require.Equal(t, 2, got.Attempt)
					require.False(t, got.AttemptedAt.Before(done[0].AttemptedAt), "the claim stamps after the outcome")
				}
				require.Equal(t, store.StateSucceeded, get(t, st, done[1].ID).State)
				require.Equal(t, store.StateScheduled, get(t, st, other).State, "a kind the claim did not ask for")
			})
		}
	})

	t.Run("StaleLeaseStillClaims", func(t *testing.T) {
		st := newStore(t)
		j := running(t, st, "k", 1)[0]
		waiting := insertOne(t, st, "k")
		stale := store.Lease{ID: j.ID, Token: newID(t)}
		fr, res := finishClaim(t, st, []store.FinishParams{{Lease: stale, Outcome: store.OutcomeSucceeded}}, claimParams(10, longLease, "k"))
		require.Equal(t, []bool{false}, fr.OK)
		require.Equal(t, []uuid.UUID{waiting}, claimIDs(res))
		requireSameRecord(t, j, get(t, st, j.ID))
	})

	t.Run("NoOutcomes", func(t *testing.T) {
		st := newStore(t)
		waiting := insertOne(t, st, "k")
		fr, res := finishClaim(t, st, nil, claimParams(10, longLease, "k"))
		require.Empty(t, fr.OK)
		require.Equal(t, []uuid.UUID{waiting}, claimIDs(res))
	})

	t.Run("InvalidChangesNothing", func(t *testing.T) {
		cases := []struct {
			name  string
			edit  func(fin []store.FinishParams, p *store.ClaimParams)
			claim bool // nil claim params
		}{
			{"Outcome", func(fin []store.FinishParams, _ *store.ClaimParams) { fin[0].Outcome = 0 }, false},
			{"NegativeDelay", func(fin []store.FinishParams, _ *store.ClaimParams) {
				fin[0].Outcome, fin[0].Delay = store.OutcomeRetry, -1
			}, false},
			{"ClaimLimit", func(_ []store.FinishParams, p *store.ClaimParams) { p.Limit = 0 }, false},
			{"ClaimLease", func(_ []store.FinishParams, p *store.ClaimParams) { p.LeaseDuration = 0 }, false},
			{"NilClaim", func([]store.FinishParams, *store.ClaimParams) {}, true},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				j := running(t, st, "k", 1)[0]
				waiting := insertOne(t, st, "k")
				before := get(t, st, waiting)
				fin := []store.FinishParams{{Lease: lease(j), Outcome: store.OutcomeSucceeded}}
				p := claimParams(10, longLease, "k")
				c.edit(fin, p)
				if c.claim {
					p = nil
				}
				fr, res, err := as[store.FinishClaimer](t, st).FinishClaim(t.Context(), fin, p)
				require.ErrorIs(t, err, store.ErrInvalidParams)
				require.Nil(t, fr)
				require.Nil(t, res)
				requireSameRecord(t, j, get(t, st, j.ID))
				requireUnchanged(t, st, before)
			})
		}
	})

	t.Run("Results", func(t *testing.T) {
		st := newStore(t)
		needsFollowUps(t, st)
		j := running(t, st, "k", 1)[0]
		waiting := insertOne(t, st, "k")
		fin := []store.FinishParams{{Lease: lease(j), Outcome: store.OutcomeSucceeded, Result: []byte(`{"n":1}`)}}
		fr, res := finishClaim(t, st, fin, claimParams(10, longLease, "k"))
		require.Equal(t, []bool{true}, fr.OK)
		require.Equal(t, []uuid.UUID{waiting}, claimIDs(res))
		got := get(t, st, j.ID)
		require.Equal(t, store.StateSucceeded, got.State)
		require.JSONEq(t, `{"n":1}`, string(got.Result))
	})

	t.Run("FlowLimits", func(t *testing.T) {
		st := newStore(t)
		needsFlows(t, st)
		setFlows(t, st, store.FlowConfig{Kind: "k", Concurrency: 2})
		js := running(t, st, "k", 2)
		a, b := insertOne(t, st, "k"), insertOne(t, st, "k")
		// One of the two running jobs ends: one slot of the kind's two
		// frees, and the claim takes one job, not two.
		fin := []store.FinishParams{{Lease: lease(js[0]), Outcome: store.OutcomeSucceeded}}
		fr, res := finishClaim(t, st, fin, claimParams(10, longLease, "k"))
		require.Equal(t, []bool{true}, fr.OK)
		require.Len(t, res.Jobs, 1)
		require.Contains(t, []uuid.UUID{a, b}, res.Jobs[0].ID)
	})

	t.Run("ManyOutcomes", func(t *testing.T) {
		st := newStore(t)
		js := running(t, st, "k", 40)
		var waiting []uuid.UUID
		for range 40 {
			waiting = append(waiting, insertOne(t, st, "k"))
		}
		fin := make([]store.FinishParams, len(js))
		for i, j := range js {
			fin[i] = store.FinishParams{Lease: lease(j), Outcome: store.Outcome(1 + i%3), Error: "e"}
		}
		fr, res := finishClaim(t, st, fin, claimParams(40, longLease, "k"))
		for i, ok := range fr.OK {
			require.True(t, ok, "row %d", i)
		}
		// Succeeded, retry (due at once) and dead: the retried jobs are
		// due after the waiting ones, which the claim takes first.
		require.ElementsMatch(t, waiting, claimIDs(res))
		for i, j := range js {
			want := []store.State{store.StateSucceeded, store.StateRetrying, store.StateDead}[i%3]
			require.Equal(t, want, get(t, st, j.ID).State, "job %d", i)
		}
	})
}
