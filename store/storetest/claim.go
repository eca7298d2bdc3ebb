package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testClaim checks Claim: due-ness, order, limits, stamps, NextRunAt,
// unclaimable states, validation and concurrency.
func testClaim(t *testing.T, newStore NewStoreFunc) {
	t.Run("OnlyDueJobs", func(t *testing.T) {
		st := newStore(t)
		now := storeNow(t, st).Truncate(time.Microsecond)
		dueNow := insertOne(t, st, "claim")
		duePast := insertOne(t, st, "claim", withRunAt(now.Add(-time.Minute)))
		notDueAt := now.Add(farFuture)
		notDue := insertOne(t, st, "claim", withRunAt(notDueAt))
		waitUntilStoreTime(t, st, get(t, st, dueNow).RunAt)

		res := claim(t, st, claimParams(10, longLease, "claim"))
		require.ElementsMatch(t, []uuid.UUID{dueNow, duePast}, claimIDs(res))
		requireTimeNear(t, notDueAt, res.NextRunAt, storedTolerance, "NextRunAt is the not-due job's run_at")
		require.Equal(t, store.StateScheduled, get(t, st, notDue).State)
		require.Empty(t, claim(t, st, claimParams(10, longLease, "claim")).Jobs)
	})

	t.Run("PriorityThenRunAt", func(t *testing.T) {
		st := newStore(t)
		now := storeNow(t, st)
		at := func(secsAgo int) func(*store.InsertParams) {
			return withRunAt(now.Add(-time.Duration(secsAgo) * time.Second))
		}
		low1 := params(t, "claim", withPriority(store.PriorityLow), at(50))
		low2 := params(t, "claim", withPriority(store.PriorityLow), at(40))
		norm1 := params(t, "claim", withPriority(store.PriorityNormal), at(30))
		norm2 := params(t, "claim", withPriority(store.PriorityNormal), at(20))
		high1 := params(t, "claim", withPriority(store.PriorityHigh), at(10))
		high2 := params(t, "claim", withPriority(store.PriorityHigh), at(5))
		// Insert in scrambled order so that insertion order cannot pass for
		// claim order.
		insert(t, st, norm2, high2, low1, norm1, low2, high1)

		steps := []struct {
			limit int
			want  []uuid.UUID
		}{
			{2, []uuid.UUID{high1.ID, high2.ID}},
			{1, []uuid.UUID{norm1.ID}},
			{10, []uuid.UUID{norm2.ID, low1.ID, low2.ID}},
			{10, []uuid.UUID{}},
		}
		for _, s := range steps {
			require.Equal(t, s.want, claimIDs(claim(t, st, claimParams(s.limit, longLease, "claim"))))
		}
	})

	t.Run("NotDueHigherPriorityDoesNotBlock", func(t *testing.T) {
		st := newStore(t)
		now := storeNow(t, st).Truncate(time.Microsecond)
		highAt := now.Add(farFuture)
		insertOne(t, st, "claim", withPriority(store.PriorityHigh), withRunAt(highAt))
		low := insertOne(t, st, "claim", withPriority(store.PriorityLow), withRunAt(now.Add(-time.Second)))
		res := claim(t, st, claimParams(1, longLease, "claim"))
		require.Equal(t, []uuid.UUID{low}, claimIDs(res))
		requireTimeNear(t, highAt, res.NextRunAt, storedTolerance)
	})

	t.Run("Limits", func(t *testing.T) {
		cases := []struct {
			name      string
			jobs      map[string]int // kind -> number of due jobs, priority by kind
			prio      map[string]int
			kinds     []store.KindLimit
			limit     int
			want      map[string]int // kind -> number claimed
			wantOrder []string       // kinds of the claimed jobs, in order
		}{
			{
				name:      "PerKind",
				jobs:      map[string]int{"a": 5, "b": 5},
				prio:      map[string]int{"a": store.PriorityHigh, "b": store.PriorityNormal},
				kinds:     []store.KindLimit{{Kind: "a", Limit: 2}, {Kind: "b", Limit: 3}},
				limit:     10,
				want:      map[string]int{"a": 2, "b": 3},
				wantOrder: []string{"a", "a", "b", "b", "b"},
			},
			{
				name:      "Total",
				jobs:      map[string]int{"a": 5, "b": 5},
				prio:      map[string]int{"a": store.PriorityHigh, "b": store.PriorityLow},
				kinds:     []store.KindLimit{{Kind: "a", Limit: 10}, {Kind: "b", Limit: 10}},
				limit:     3,
				want:      map[string]int{"a": 3},
				wantOrder: []string{"a", "a", "a"},
			},
			{
				name:      "KindAtLimitLetsOthersThrough",
				jobs:      map[string]int{"a": 3, "b": 3},
				prio:      map[string]int{"a": store.PriorityHigh, "b": store.PriorityNormal},
				kinds:     []store.KindLimit{{Kind: "a", Limit: 1}, {Kind: "b", Limit: 5}},
				limit:     3,
				want:      map[string]int{"a": 1, "b": 2},
				wantOrder: []string{"a", "b", "b"},
			},
			{
				name:      "TotalAcrossKindsByPriority",
				jobs:      map[string]int{"a": 3, "b": 3},
				prio:      map[string]int{"a": store.PriorityLow, "b": store.PriorityHigh},
				kinds:     []store.KindLimit{{Kind: "a", Limit: 3}, {Kind: "b", Limit: 2}},
				limit:     4,
				want:      map[string]int{"a": 2, "b": 2},
				wantOrder: []string{"b", "b", "a", "a"},
			},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				var ps []store.InsertParams
				past := storeNow(t, st).Add(-time.Minute)
				for kind, n := range c.jobs {
					for range n {
						ps = append(ps, params(t, kind, withPriority(c.prio[kind]), withRunAt(past)))
					}
				}
				insert(t, st, ps...)
				res := claim(t, st, &store.ClaimParams{Owner: owner, Kinds: c.kinds, Limit: c.limit, LeaseDuration: longLease})
				got := map[string]int{}
				var order []string
				for _, j := range res.Jobs {
					got[j.Kind]++
					order = append(order, j.Kind)
				}
				require.Equal(t, c.want, got)
				require.Equal(t, c.wantOrder, order, "claim order")
				require.False(t, res.NextRunAt.IsZero(), "due jobs were left behind")
				require.False(t, res.NextRunAt.After(res.Now), "NextRunAt %s after Now %s with due jobs left", res.NextRunAt, res.Now)
			})
		}
	})

	t.Run("KindsFilter", func(t *testing.T) {
		st := newStore(t)
		a := insertOne(t, st, "a")
		insertOne(t, st, "b")
		c := insertOne(t, st, "c")
		waitUntilStoreTime(t, st, get(t, st, c).RunAt)
		res := claim(t, st, claimParams(10, longLease, "a", "c", "unknown"))
		require.ElementsMatch(t, []uuid.UUID{a, c}, claimIDs(res))
		require.True(t, res.NextRunAt.IsZero(), "NextRunAt must ignore kinds not asked for, got %s", res.NextRunAt)
	})

	t.Run("Stamps", func(t *testing.T) {
		st := newStore(t)
		ids := insert(t, st, params(t, "claim"), params(t, "claim"))
		lease := 10 * time.Minute
		res := claim(t, st, claimParams(10, lease, "claim"))
		require.ElementsMatch(t, ids, claimIDs(res))
		requireTimeNear(t, storeNow(t, st), res.Now, clockTolerance, "ClaimResult.Now")
		tokens := map[uuid.UUID]bool{}
		for _, j := range res.Jobs {
			require.Equal(t, store.StateRunning, j.State)
			require.Equal(t, owner, j.Owner)
			require.NotEqual(t, uuid.Nil, j.LeaseToken)
			require.Equal(t, 1, j.Attempt)
			requireTimeNear(t, res.Now.Add(lease), j.LeaseExpiresAt, clockTolerance, "LeaseExpiresAt")
			requireTimeNear(t, res.Now, j.AttemptedAt, clockTolerance, "AttemptedAt")
			require.True(t, j.FinishedAt.IsZero())
			require.JSONEq(t, `{"n":1}`, string(j.Payload))
			tokens[j.LeaseToken] = true
			requireSameRecord(t, j, get(t, st, j.ID), "claimed record and stored record differ")
		}
		require.Len(t, tokens, 2, "each claimed job gets its own token")
	})

	t.Run("Ahead", func(t *testing.T) {
		// A store may take jobs due within ClaimParams.Ahead: each such
		// job's attempt starts at its run_at (AttemptedAt), the window
		// applied is reported and never wider than asked, and jobs past
		// it stay. A store that applies none claims only due jobs.
		st := newStore(t)
		now := storeNow(t, st).Truncate(time.Microsecond)
		due := insertOne(t, st, "claim", withRunAt(now.Add(-time.Second)))
		soon := insertOne(t, st, "claim", withRunAt(now.Add(store.MaxClaimAhead/2)))
		laterAt := now.Add(farFuture)
		insertOne(t, st, "claim", withRunAt(laterAt))
		p := claimParams(10, longLease, "claim")
		p.Ahead = store.MaxClaimAhead
		res := claim(t, st, p)
		require.GreaterOrEqual(t, res.Ahead, time.Duration(0), "ClaimResult.Ahead")
		require.LessOrEqual(t, res.Ahead, p.Ahead, "ClaimResult.Ahead wider than asked")
		if !res.Clock.IsZero() {
			require.False(t, res.Clock.Before(res.Now), "Clock %s before Now %s", res.Clock, res.Now)
		}
		soonAt := get(t, st, soon).RunAt
		want := []uuid.UUID{due}
		if !soonAt.After(res.Now.Add(res.Ahead)) {
			want = append(want, soon)
		} else {
			requireTimeNear(t, soonAt, res.NextRunAt, storedTolerance, "NextRunAt is the job past the window")
		}
		require.Equal(t, want, claimIDs(res))
		for _, j := range res.Jobs {
			wantAt := res.Now
			if j.RunAt.After(res.Now) {
				wantAt = j.RunAt // claimed ahead: the attempt starts at its run_at
			}
			requireTimeNear(t, wantAt, j.AttemptedAt, storedTolerance, "AttemptedAt of job %s", j.ID)
			requireSameRecord(t, j, get(t, st, j.ID), "claimed record and stored record differ")
		}
		if len(want) == 2 {
			requireTimeNear(t, laterAt, res.NextRunAt, storedTolerance, "NextRunAt is the job past the window")
		}
	})

	t.Run("FreshTokenEachClaim", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "claim", withMaxAttempts(5))
		first := claimOnly(t, st, "claim", id, longLease)
		finishOne(t, st, first, store.FinishParams{Outcome: store.OutcomeRetry, Error: "e1"})
		second := claimOnly(t, st, "claim", id, longLease)
		require.Equal(t, 2, second.Attempt)
		require.NotEqual(t, first.LeaseToken, second.LeaseToken)
		require.False(t, second.AttemptedAt.Before(first.AttemptedAt))
		finishOne(t, st, second, store.FinishParams{Outcome: store.OutcomeRelease})
		third := claimOnly(t, st, "claim", id, longLease)
		require.Equal(t, 2, third.Attempt, "a release gives the attempt back")
		require.NotEqual(t, second.LeaseToken, third.LeaseToken)
		require.NotEqual(t, first.LeaseToken, third.LeaseToken)
	})

	t.Run("NextRunAt", func(t *testing.T) {
		t.Run("EmptyStore", func(t *testing.T) {
			st := newStore(t)
			res := claim(t, st, claimParams(10, longLease, "claim"))
			require.Empty(t, res.Jobs)
			require.True(t, res.NextRunAt.IsZero())
		})
		t.Run("EarliestFuture", func(t *testing.T) {
			st := newStore(t)
			now := storeNow(t, st).Truncate(time.Microsecond)
			insertOne(t, st, "claim", withRunAt(now.Add(3*time.Hour)))
			insertOne(t, st, "claim", withRunAt(now.Add(2*time.Hour)), withPriority(store.PriorityLow))
			insertOne(t, st, "claim", withRunAt(now.Add(4*time.Hour)), withPriority(store.PriorityHigh))
			insertOne(t, st, "other", withRunAt(now.Add(time.Hour)))
			res := claim(t, st, claimParams(10, longLease, "claim"))
			require.Empty(t, res.Jobs)
			requireTimeNear(t, now.Add(2*time.Hour), res.NextRunAt, storedTolerance)
		})
		t.Run("IncludesRetrying", func(t *testing.T) {
			st := newStore(t)
			j := makeJob(t, st, store.StateRetrying, "claim")
			res := claim(t, st, claimParams(10, longLease, "claim"))
			require.Empty(t, res.Jobs)
			requireTimeNear(t, j.RunAt, res.NextRunAt, storedTolerance)
		})
		t.Run("LimitHit", func(t *testing.T) {
			st := newStore(t)
			insert(t, st, params(t, "claim"), params(t, "claim"), params(t, "claim"))
			res := claim(t, st, claimParams(2, longLease, "claim"))
			require.Len(t, res.Jobs, 2)
			require.False(t, res.NextRunAt.IsZero())
			require.False(t, res.NextRunAt.After(res.Now), "NextRunAt %s after Now %s", res.NextRunAt, res.Now)
		})
		t.Run("IgnoresUnclaimableStates", func(t *testing.T) {
			st := newStore(t)
			for _, s := range []store.State{store.StatePaused, store.StateRunning, store.StateSucceeded, store.StateDead, store.StateCancelled} {
				makeJob(t, st, s, "claim")
			}
			res := claim(t, st, claimParams(10, longLease, "claim"))
			require.Empty(t, res.Jobs)
			require.True(t, res.NextRunAt.IsZero(), "got %s", res.NextRunAt)
		})
	})

	t.Run("NeverClaimed", func(t *testing.T) {
		// Each job is due (run_at in the past) but not claimable.
		cases := []struct {
			name string
			make func(t *testing.T, st store.Store) *store.JobRecord
		}{
			{"Paused", func(t *testing.T, st store.Store) *store.JobRecord {
				id := insertOne(t, st, "claim", withRunAt(storeNow(t, st).Add(-time.Minute)))
				return control(t, st, id, store.OpPause)
			}},
			{"Cancelled", func(t *testing.T, st store.Store) *store.JobRecord {
				id := insertOne(t, st, "claim", withRunAt(storeNow(t, st).Add(-time.Minute)))
				return control(t, st, id, store.OpCancel)
			}},
			{"Succeeded", func(t *testing.T, st store.Store) *store.JobRecord {
				return makeJob(t, st, store.StateSucceeded, "claim")
			}},
			{"Dead", func(t *testing.T, st store.Store) *store.JobRecord {
				return makeJob(t, st, store.StateDead, "claim")
			}},
			{"RunningLeaseHeld", func(t *testing.T, st store.Store) *store.JobRecord {
				return makeJob(t, st, store.StateRunning, "claim")
			}},
			{"RunningLeaseExpiredNotRescued", func(t *testing.T, st store.Store) *store.JobRecord {
				id := insertOne(t, st, "claim")
				j := claimOnly(t, st, "claim", id, shortLease)
				waitUntilStoreTime(t, st, j.LeaseExpiresAt)
				return get(t, st, id)
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				before := get(t, st, c.make(t, st).ID)
				res := claim(t, st, claimParams(10, longLease, "claim"))
				require.Empty(t, res.Jobs)
				requireUnchanged(t, st, before)
			})
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		valid := func() *store.ClaimParams { return claimParams(10, longLease, "claim") }
		cases := []struct {
			name string
			mod  func(*store.ClaimParams)
		}{
			{"ZeroLimit", func(p *store.ClaimParams) { p.Limit = 0 }},
			{"NegativeLimit", func(p *store.ClaimParams) { p.Limit = -1 }},
			{"ZeroLease", func(p *store.ClaimParams) { p.LeaseDuration = 0 }},
			{"NegativeLease", func(p *store.ClaimParams) { p.LeaseDuration = -time.Second }},
			{"ZeroKindLimit", func(p *store.ClaimParams) { p.Kinds[0].Limit = 0 }},
			{"NegativeKindLimit", func(p *store.ClaimParams) { p.Kinds[0].Limit = -3 }},
			{"EmptyKindName", func(p *store.ClaimParams) { p.Kinds = append(p.Kinds, store.KindLimit{Kind: "", Limit: 1}) }},
			{"NegativeAhead", func(p *store.ClaimParams) { p.Ahead = -time.Millisecond }},
			{"AheadPastMax", func(p *store.ClaimParams) { p.Ahead = store.MaxClaimAhead + time.Microsecond }},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				id := insertOne(t, st, "claim", withRunAt(storeNow(t, st).Add(-time.Minute)))
				before := get(t, st, id)
				p := valid()
				c.mod(p)
				_, err := st.Claim(t.Context(), p)
				require.ErrorIs(t, err, store.ErrInvalidParams)
				requireUnchanged(t, st, before)
			})
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		st := newStore(t)
		ctx := ctxTimeout(t)
		const (
			jobs     = 2000
			claimers = 8
			batch    = 200
		)
		all := make(map[uuid.UUID]bool, jobs)
		past := storeNow(t, st).Add(-time.Minute)
		for i := 0; i < jobs; i += batch {
			ps := make([]store.InsertParams, batch)
			for k := range ps {
				ps[k] = params(t, "claim.concurrent", withRunAt(past), withPriority(store.Priorities[k%len(store.Priorities)]))
				all[ps[k].ID] = true
			}
			insert(t, st, ps...)
		}

		got := make([][]uuid.UUID, claimers)
		errs := make([]error, claimers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range claimers {
			wg.Go(func() {
				<-start
				p := claimParams(17, longLease, "claim.concurrent")
				for {
					res, err := st.Claim(ctx, p)
					if err != nil {
						errs[w] = err
						return
					}
					if len(res.Jobs) == 0 {
						return
					}
					for _, j := range res.Jobs {
						got[w] = append(got[w], j.ID)
					}
				}
			})
		}
		close(start)
		wg.Wait()

		seen := make(map[uuid.UUID]int, jobs)
		for w := range claimers {
			require.NoError(t, errs[w], "claimer %d", w)
			for _, id := range got[w] {
				seen[id]++
			}
		}
		for id, n := range seen {
			require.Equal(t, 1, n, "job %s claimed %d times", id, n)
			require.True(t, all[id], "claimed unknown job %s", id)
		}
		require.Len(t, seen, jobs, "every job is claimed")
		require.Empty(t, claim(t, st, claimParams(10, longLease, "claim.concurrent")).Jobs)
	})
}
