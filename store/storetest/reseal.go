package storetest

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testReseal checks store.Resealer: a job's sealed values are rewritten
// only while its payload and result are still the old ones, in every
// state, also once it moved to the history (store.Archiver).
func testReseal(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.Resealer](t, newStore)
	fu := func(payload string) []store.FollowUp {
		return []store.FollowUp{{On: []store.State{store.StateSucceeded}, Job: store.InsertParams{
			ID: uuid.UUID{1}, Kind: "reseal.after", Payload: json.RawMessage(payload), Priority: store.PriorityNormal, MaxAttempts: 1}}}
	}
	cases := []struct {
		name string
		// prepare inserts a job and returns it as stored.
		prepare func(t *testing.T, st store.Store) *store.JobRecord
		// row is the reseal to apply to the stored job j.
		row   func(j *store.JobRecord) store.ResealParams
		apply bool
	}{
		{"ScheduledPayloadMetadataFollowUps", func(t *testing.T, st store.Store) *store.JobRecord {
			id := insertOne(t, st, "reseal", notDue, func(p *store.InsertParams) {
				p.Payload, p.Metadata, p.FollowUps = json.RawMessage(`{"v":"k1"}`), map[string]string{"s": "k1", "plain": "x"}, fu(`{"f":"k1"}`)
			})
			return get(t, st, id)
		}, func(j *store.JobRecord) store.ResealParams {
			return store.ResealParams{ID: j.ID, OldPayload: j.Payload, Payload: json.RawMessage(`{"v":"k2"}`),
				Metadata: map[string]string{"s": "k2", "plain": "x"}, FollowUps: fu(`{"f":"k2"}`)}
		}, true},
		{"StalePayload", func(t *testing.T, st store.Store) *store.JobRecord {
			return get(t, st, insertOne(t, st, "reseal", notDue))
		}, func(j *store.JobRecord) store.ResealParams {
			return store.ResealParams{ID: j.ID, OldPayload: json.RawMessage(`{"other":1}`), Payload: json.RawMessage(`{"v":"k2"}`)}
		}, false},
		{"UnknownJob", func(t *testing.T, st store.Store) *store.JobRecord {
			return &store.JobRecord{ID: newID(t), Payload: json.RawMessage(`{}`)}
		}, func(j *store.JobRecord) store.ResealParams {
			return store.ResealParams{ID: j.ID, OldPayload: j.Payload, Payload: json.RawMessage(`{"v":"k2"}`)}
		}, false},
		{"SucceededWithResult", func(t *testing.T, st store.Store) *store.JobRecord {
			return finishedWithResult(t, st, `{"r":"k1"}`)
		}, func(j *store.JobRecord) store.ResealParams {
			return store.ResealParams{ID: j.ID, OldPayload: j.Payload, Payload: json.RawMessage(`{"v":"k2"}`),
				OldResult: j.Result, Result: json.RawMessage(`{"r":"k2"}`)}
		}, true},
		{"StaleResult", func(t *testing.T, st store.Store) *store.JobRecord {
			return finishedWithResult(t, st, `{"r":"k1"}`)
		}, func(j *store.JobRecord) store.ResealParams {
			return store.ResealParams{ID: j.ID, OldPayload: j.Payload, Payload: json.RawMessage(`{"v":"k2"}`),
				OldResult: json.RawMessage(`{"r":"written meanwhile"}`), Result: json.RawMessage(`{"r":"k2"}`)}
		}, false},
		{"ResultAppearedMeanwhile", func(t *testing.T, st store.Store) *store.JobRecord {
			j := finishedWithResult(t, st, `{"r":"k1"}`)
			j.Result = nil // as read before the attempt ended
			return j
		}, func(j *store.JobRecord) store.ResealParams {
			return store.ResealParams{ID: j.ID, OldPayload: j.Payload, Payload: json.RawMessage(`{"v":"k2"}`)}
		}, false},
		{"InHistory", func(t *testing.T, st store.Store) *store.JobRecord {
			j := finishedWithResult(t, st, `{"r":"k1"}`)
			if ar, ok := st.(store.Archiver); ok {
				_, err := ar.Archive(t.Context(), 1000)
				require.NoError(t, err)
			}
			return j
		}, func(j *store.JobRecord) store.ResealParams {
			return store.ResealParams{ID: j.ID, OldPayload: j.Payload, Payload: json.RawMessage(`{"v":"k2"}`),
				OldResult: j.Result, Result: json.RawMessage(`{"r":"k2"}`)}
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			rs := as[store.Resealer](t, st)
			j := c.prepare(t, st)
			row := c.row(j)
			ok, err := rs.Reseal(t.Context(), []store.ResealParams{row})
			require.NoError(t, err)
			require.Equal(t, []bool{c.apply}, ok)
			if row.ID != j.ID || !c.apply {
				if got, err := st.Get(t.Context(), j.ID); err == nil {
					require.NotEqual(t, string(row.Payload), string(got.Payload), "a reseal that did not apply changed the payload")
				}
				return
			}
			got := get(t, st, j.ID)
			require.Equal(t, string(row.Payload), string(got.Payload))
			require.Equal(t, j.State, got.State, "reseal changed the state")
			require.Equal(t, j.Attempt, got.Attempt)
			if row.OldResult != nil {
				require.Equal(t, string(row.Result), string(got.Result))
			} else {
				require.Equal(t, string(j.Result), string(got.Result))
			}
			if row.Metadata != nil {
				require.Equal(t, row.Metadata, got.Metadata)
			} else {
				require.Equal(t, j.Metadata, got.Metadata)
			}
			if row.FollowUps != nil {
				require.Len(t, got.FollowUps, 1)
				require.Equal(t, string(row.FollowUps[0].Job.Payload), string(got.FollowUps[0].Job.Payload))
			}
		})
	}
	t.Run("Invalid", func(t *testing.T) {
		rs := as[store.Resealer](t, newStore(t))
		_, err := rs.Reseal(t.Context(), []store.ResealParams{{ID: uuid.Nil, OldPayload: []byte(`1`), Payload: []byte(`2`)}})
		require.ErrorIs(t, err, store.ErrInvalidParams)
	})
}

// finishedWithResult inserts, claims and finishes a job (succeeded) with
// result, and returns it as stored.
func finishedWithResult(t *testing.T, st store.Store, result string) *store.JobRecord {
	t.Helper()
	as[store.FollowUpStore](t, st)
	id := insertOne(t, st, "reseal.done", func(p *store.InsertParams) { p.Payload = json.RawMessage(`{"v":"k1"}`) })
	j := claimOnly(t, st, "reseal.done", id, longLease)
	got := finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(result)})
	require.Equal(t, result, string(got.Result))
	return got
}
