package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// followUpTo returns a follow-up of kind "after."+name on states.
func followUpTo(name string, on ...store.State) store.FollowUp {
	return store.FollowUp{On: on, Job: store.InsertParams{Kind: "after." + name, Payload: []byte(`{"then": "` + name + `"}`),
		Priority: store.PriorityHigh, MaxAttempts: 2}}
}

// withFollowUps adds follow-ups to a job.
func withFollowUps(fs ...store.FollowUp) func(*store.InsertParams) {
	return func(p *store.InsertParams) { p.FollowUps = append(p.FollowUps, fs...) }
}

// allFollowUps are one follow-up per final state and one on all of them.
var allFollowUps = withFollowUps(
	followUpTo("succeeded", store.StateSucceeded),
	followUpTo("dead", store.StateDead),
	followUpTo("cancelled", store.StateCancelled),
	followUpTo("any", store.StateSucceeded, store.StateDead, store.StateCancelled),
)

// testFollowUps checks FollowUpStore: follow-ups inserted by whatever ends
// a job, results and a success's Then.
func testFollowUps(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FollowUpStore](t, newStore)

	ends := []struct {
		name  string
		state store.State
		end   func(t *testing.T, st store.Store, id uuid.UUID)
	}{
		{"FinishSucceeded", store.StateSucceeded, func(t *testing.T, st store.Store, id uuid.UUID) {
			finishOne(t, st, claimOnly(t, st, "parent", id, longLease), store.FinishParams{Outcome: store.OutcomeSucceeded})
		}},
		{"FinishDead", store.StateDead, func(t *testing.T, st store.Store, id uuid.UUID) {
			finishOne(t, st, claimOnly(t, st, "parent", id, longLease), store.FinishParams{Outcome: store.OutcomeDead, Error: "boom"})
		}},
		{"FinishCancelled", store.StateCancelled, func(t *testing.T, st store.Store, id uuid.UUID) {
			finishOne(t, st, claimOnly(t, st, "parent", id, longLease), store.FinishParams{Outcome: store.OutcomeCancelled, Error: "cancelled"})
		}},
		{"RetryOfCancelRequested", store.StateCancelled, func(t *testing.T, st store.Store, id uuid.UUID) {
			j := claimOnly(t, st, "parent", id, longLease)
			control(t, st, id, store.OpCancel)
			finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Error: "x"})
		}},
		{"RescueLastAttempt", store.StateDead, func(t *testing.T, st store.Store, id uuid.UUID) {
			j := claimOnly(t, st, "parent", id, shortLease)
			waitUntilStoreTime(t, st, j.LeaseExpiresAt)
			rescue(t, st, 10, 1)
		}},
		{"ControlCancel", store.StateCancelled, func(t *testing.T, st store.Store, id uuid.UUID) {
			control(t, st, id, store.OpCancel)
		}},
		{"BulkCancel", store.StateCancelled, func(t *testing.T, st store.Store, id uuid.UUID) {
			n, err := as[store.BulkController](t, st).Bulk(t.Context(), &store.BulkParams{Filter: store.JobFilter{IDs: []uuid.UUID{id}}, Op: store.BulkCancel, Limit: 10})
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}},
	}
	for _, e := range ends {
		t.Run("InsertedOn"+e.name, func(t *testing.T) {
			st := newStore(t)
			fs := as[store.FollowUpStore](t, st)
			id := insertOne(t, st, "parent", withMaxAttempts(1), allFollowUps)
			require.Len(t, get(t, st, id).FollowUps, 4, "follow-up templates kept on the job")
			before := storeNow(t, st)
			e.end(t, st, id)
			require.Equal(t, e.state, get(t, st, id).State)
			got, err := fs.FollowUps(t.Context(), id)
			require.NoError(t, err)
			var kinds []string
			for _, f := range got {
				kinds = append(kinds, f.Kind)
				require.Equal(t, id, f.Parent)
				require.Equal(t, store.StateScheduled, f.State)
				require.Equal(t, store.PriorityHigh, f.Priority)
				require.Equal(t, 2, f.MaxAttempts)
				require.Empty(t, f.FollowUps)
				require.NotEqual(t, uuid.Nil, f.ID)
				require.JSONEq(t, `{"then": "`+strings.TrimPrefix(f.Kind, "after.")+`"}`, string(f.Payload))
				requireBetween(t, before, storeNow(t, st), f.RunAt, "a follow-up without delay is due when its parent ended")
				requireSameRecord(t, get(t, st, f.ID), f)
			}
			want := []string{"after." + string(e.state), "after.any"}
			require.ElementsMatch(t, want, kinds)
			// A follow-up is a job like any other: claimable.
			res := claim(t, st, claimParams(10, longLease, want...))
			require.Len(t, res.Jobs, 2)
		})
	}

	t.Run("DelayCountsFromTheEnd", func(t *testing.T) {
		st := newStore(t)
		fs := as[store.FollowUpStore](t, st)
		f := followUpTo("later", store.StateSucceeded)
		f.Job.Delay = time.Hour
		id := insertOne(t, st, "parent", withFollowUps(f))
		finishOne(t, st, claimOnly(t, st, "parent", id, longLease), store.FinishParams{Outcome: store.OutcomeSucceeded})
		got, err := fs.FollowUps(t.Context(), id)
		require.NoError(t, err)
		require.Len(t, got, 1)
		requireTimeNear(t, storeNow(t, st).Add(time.Hour), got[0].RunAt, clockTolerance)
	})

	t.Run("NotOnOtherOutcomes", func(t *testing.T) {
		st := newStore(t)
		fs := as[store.FollowUpStore](t, st)
		id := insertOne(t, st, "parent", withMaxAttempts(3), allFollowUps)
		j := claimOnly(t, st, "parent", id, longLease)
		finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Error: "again"})
		control(t, st, id, store.OpPause)
		got, err := fs.FollowUps(t.Context(), id)
		require.NoError(t, err)
		require.Empty(t, got, "a job that did not end inserted follow-ups")
	})

	t.Run("EndingAgainAfterRunNowInsertsAgain", func(t *testing.T) {
		st := newStore(t)
		fs := as[store.FollowUpStore](t, st)
		id := insertOne(t, st, "parent", withMaxAttempts(1), withFollowUps(followUpTo("dead", store.StateDead)))
		for range 2 {
			finishOne(t, st, claimOnly(t, st, "parent", id, longLease), store.FinishParams{Outcome: store.OutcomeDead, Error: "boom"})
			if get(t, st, id).State == store.StateDead {
				control(t, st, id, store.OpRunNow)
			}
		}
		got, err := fs.FollowUps(t.Context(), id)
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.NotEqual(t, got[0].ID, got[1].ID)
	})

	t.Run("StaleFinishInsertsNothing", func(t *testing.T) {
		st := newStore(t)
		fs := as[store.FollowUpStore](t, st)
		id := insertOne(t, st, "parent", withFollowUps(followUpTo("succeeded", store.StateSucceeded)))
		j := claimOnly(t, st, "parent", id, longLease)
		stale := lease(j)
		stale.Token = newID(t)
		then := params(t, "chained")
		require.Equal(t, []bool{false}, finish(t, st, store.FinishParams{Lease: stale, Outcome: store.OutcomeSucceeded,
			Result: json.RawMessage(`{"n":1}`), Then: []store.InsertParams{then}}))
		got, err := fs.FollowUps(t.Context(), id)
		require.NoError(t, err)
		require.Empty(t, got)
		requireNotFound(t, st, then.ID)
		require.Nil(t, get(t, st, id).Result)
	})

	t.Run("Result", func(t *testing.T) {
		for _, out := range []store.Outcome{store.OutcomeSucceeded, store.OutcomeRetry, store.OutcomeDead} {
			t.Run(out.String(), func(t *testing.T) {
				st := newStore(t)
				id := insertOne(t, st, "k", withMaxAttempts(3))
				result := json.RawMessage(`{"rows": 12,  "file": "x.csv"}`)
				finishOne(t, st, claimOnly(t, st, "k", id, longLease), store.FinishParams{Outcome: out, Error: "e", Result: result})
				require.Equal(t, string(result), string(get(t, st, id).Result), "result not kept byte for byte")
			})
		}
	})

	t.Run("ThenOnSuccessOnly", func(t *testing.T) {
		st := newStore(t)
		fs := as[store.FollowUpStore](t, st)
		id := insertOne(t, st, "k", withMaxAttempts(3))
		next := params(t, "next", func(p *store.InsertParams) { p.Payload = []byte(`{"step": 2}`) })
		finishOne(t, st, claimOnly(t, st, "k", id, longLease), store.FinishParams{Outcome: store.OutcomeRetry, Error: "e",
			Then: []store.InsertParams{next}})
		requireNotFound(t, st, next.ID)
		finishOne(t, st, claimOnly(t, st, "k", id, longLease), store.FinishParams{Outcome: store.OutcomeSucceeded,
			Then: []store.InsertParams{next}})
		got := get(t, st, next.ID)
		require.Equal(t, id, got.Parent)
		require.Equal(t, store.StateScheduled, got.State)
		require.JSONEq(t, `{"step": 2}`, string(got.Payload))
		ups, err := fs.FollowUps(t.Context(), id)
		require.NoError(t, err)
		require.Len(t, ups, 1)
	})

	t.Run("InvalidParams", func(t *testing.T) {
		st := newStore(t)
		bad := []func(*store.InsertParams){
			withFollowUps(store.FollowUp{Job: params(t, "x")}),                                        // no state
			withFollowUps(store.FollowUp{On: []store.State{store.StateRunning}, Job: params(t, "x")}), // not final
			withFollowUps(store.FollowUp{On: []store.State{store.StateDead}, Job: store.InsertParams{Kind: "x", MaxAttempts: 1}}),
		}
		for i, mod := range bad {
			_, err := st.Insert(t.Context(), []store.InsertParams{params(t, "k", mod)})
			require.ErrorIs(t, err, store.ErrInvalidParams, "case %d", i)
		}
		id := insertOne(t, st, "k")
		j := claimOnly(t, st, "k", id, longLease)
		big := json.RawMessage(fmt.Sprintf(`"%s"`, strings.Repeat("r", store.MaxResultSize)))
		for _, p := range []store.FinishParams{
			{Lease: lease(j), Outcome: store.OutcomeSucceeded, Result: big},
			{Lease: lease(j), Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{`)},
			{Lease: lease(j), Outcome: store.OutcomeSucceeded, Then: []store.InsertParams{{Kind: "x"}}},
		} {
			_, err := st.Finish(t.Context(), []store.FinishParams{p})
			require.ErrorIs(t, err, store.ErrInvalidParams)
		}
		requireUnchanged(t, st, j)
	})
}
