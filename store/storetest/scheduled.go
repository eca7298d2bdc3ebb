package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testScheduledAt checks JobRecord.ScheduledAt: the effective run_at at
// insert, through every insert path, and never changed afterwards.
func testScheduledAt(t *testing.T, newStore NewStoreFunc) {
	t.Run("AtInsert", func(t *testing.T) {
		st := newStore(t)
		now := storeNow(t, st).Truncate(time.Microsecond)
		cases := []struct {
			name  string
			mods  []func(*store.InsertParams)
			want  func(insertNow time.Time) time.Time // insertNow: the store clock just before the insert
			slack time.Duration
		}{
			{"Now", nil, func(n time.Time) time.Time { return n }, clockTolerance},
			{"Delay", []func(*store.InsertParams){withDelay(2 * time.Hour)}, func(n time.Time) time.Time { return n.Add(2 * time.Hour) }, clockTolerance},
			{"RunAtFuture", []func(*store.InsertParams){withRunAt(now.Add(37 * time.Minute))}, func(time.Time) time.Time { return now.Add(37 * time.Minute) }, storedTolerance},
			{"RunAtPast", []func(*store.InsertParams){withRunAt(now.Add(-3 * time.Hour))}, func(time.Time) time.Time { return now.Add(-3 * time.Hour) }, storedTolerance},
			{"RunAtWinsOverDelay", []func(*store.InsertParams){withRunAt(now.Add(5 * time.Minute)), withDelay(time.Hour)}, func(time.Time) time.Time { return now.Add(5 * time.Minute) }, storedTolerance},
		}
		// Stores may write one row, many rows and rows with unique keys
		// in different ways (PostgreSQL: one statement, COPY, INSERT …
		// ON CONFLICT); each must stamp ScheduledAt.
		paths := []struct {
			name string
			add  func(t *testing.T, st store.Store, p store.InsertParams)
		}{
			{"One", func(t *testing.T, st store.Store, p store.InsertParams) { insert(t, st, p) }},
			{"Many", func(t *testing.T, st store.Store, p store.InsertParams) {
				insert(t, st, params(t, "scheduled.other"), p)
			}},
			{"ManyKeyed", func(t *testing.T, st store.Store, p store.InsertParams) {
				p.UniqueKey = "scheduled:" + p.ID.String()
				insert(t, st, params(t, "scheduled.other", withUniqueKey("other:"+p.ID.String())), p)
			}},
		}
		for _, path := range paths {
			for _, c := range cases {
				t.Run(path.name+"/"+c.name, func(t *testing.T) {
					p := params(t, "scheduled", c.mods...)
					insertNow := storeNow(t, st) // not the area's start: a slow machine may be seconds past it
					path.add(t, st, p)
					j := get(t, st, p.ID)
					requireTimeNear(t, j.RunAt, j.ScheduledAt, 0, "ScheduledAt = RunAt at insert")
					requireTimeNear(t, c.want(insertNow), j.ScheduledAt, c.slack)
				})
			}
		}
	})

	t.Run("FixedAfterwards", func(t *testing.T) {
		// One job goes through every transition that moves run_at or
		// attempt; ScheduledAt stays what it was at insert.
		st := newStore(t)
		at := storeNow(t, st).Truncate(time.Microsecond).Add(-time.Hour) // due, and unlike any later now
		id := insertOne(t, st, "scheduled", withRunAt(at), withMaxAttempts(20))
		want := get(t, st, id).ScheduledAt
		requireTimeNear(t, at, want, storedTolerance)

		var cur *store.JobRecord // the latest claim
		claimIt := func(t *testing.T) { cur = claimOnly(t, st, "scheduled", id, longLease) }
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
			{"Claim", claimIt},
			{"Retry", end(store.FinishParams{Outcome: store.OutcomeRetry, Error: "e"})},
			{"ClaimRetrying", claimIt},
			{"Snooze", end(store.FinishParams{Outcome: store.OutcomeSnooze})},
			{"ClaimSnoozed", claimIt},
			{"Release", end(store.FinishParams{Outcome: store.OutcomeRelease})},
			{"ClaimReleased", claimIt},
			{"PauseRunning", op(store.OpPause)},
			{"RetryPaused", end(store.FinishParams{Outcome: store.OutcomeRetry, Error: "e"})},
			{"Resume", op(store.OpResume)},
			{"Pause", op(store.OpPause)},
			{"RunNowPaused", op(store.OpRunNow)},
			{"RunNow", op(store.OpRunNow)},
			{"ClaimThenRescue", func(t *testing.T) {
				cur = claimOnly(t, st, "scheduled", id, shortLease)
				waitUntilStoreTime(t, st, cur.LeaseExpiresAt)
				rescue(t, st, 10, 1)
			}},
			{"ClaimRescued", claimIt},
			{"Dead", end(store.FinishParams{Outcome: store.OutcomeDead, Error: "e"})},
			{"RunNowDead", op(store.OpRunNow)},
			{"Cancel", op(store.OpCancel)},
			{"RunNowCancelled", op(store.OpRunNow)},
			{"ClaimLast", claimIt},
			{"Succeed", end(store.FinishParams{Outcome: store.OutcomeSucceeded})},
		}
		for _, s := range steps {
			t.Run(s.name, func(t *testing.T) {
				s.do(t)
				got := get(t, st, id)
				requireTimeNear(t, want, got.ScheduledAt, 0, "ScheduledAt changed")
				requireTimeNear(t, want, cur.ScheduledAt, 0, "a claim returned another ScheduledAt")
			})
		}
		require.True(t, get(t, st, id).RunAt.After(want), "run_at never moved: the steps proved nothing")
	})

	t.Run("Periodic", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		tick := storeNow(t, st).Truncate(time.Second).Add(-time.Minute)
		p := fireParams(t, "scheduled.periodic", tick)
		res, err := ps.FirePeriodic(t.Context(), p)
		require.NoError(t, err)
		require.Equal(t, []store.InsertResult{{ID: p.Ticks[0].Job.ID}}, res.Jobs)
		id := res.Jobs[0].ID
		requireTimeNear(t, tick, get(t, st, id).ScheduledAt, storedTolerance, "a periodic job's ScheduledAt is its tick")
		j := claimOnly(t, st, "scheduled.periodic", id, longLease)
		got := finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Delay: time.Hour, Error: "e"})
		requireTimeNear(t, tick, got.ScheduledAt, storedTolerance)
	})
}
