package storetest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testListBrief checks ListJobs in brief (ListJobsParams.PreviewBytes):
// every listed record is store.BriefRecord of the whole job at every
// preview length, cuts included (a multi-byte character is never split:
// the payload, the result and the latest error hold 2- and 4-byte
// characters), and a preview length out of range is refused.
func testListBrief(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	in := as[store.JobInspector](t, st)
	_, followUps := st.(store.FollowUpStore)

	// A payload of 2-byte characters, an error text of 4-byte ones.
	payload := `{"s":"` + strings.Repeat("é", 3000) + `"}`
	long := strings.Repeat("𝄞", 2000) + " at the end"
	var ids []uuid.UUID

	// Dead after two failed attempts, with metadata (and, where stores
	// keep them, a follow-up).
	mods := []func(*store.InsertParams){withPayload(payload), withMaxAttempts(5), withMetadata(map[string]string{"tenant": "t1"})}
	if followUps {
		mods = append(mods, func(p *store.InsertParams) {
			p.FollowUps = []store.FollowUp{{On: []store.State{store.StateDead}, Job: params(t, "brief.followup", withPayload(payload))}}
		})
	}
	id := insertOne(t, st, "brief", mods...)
	j := claimOnly(t, st, "brief", id, longLease)
	finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Error: "first " + long})
	j = claimOnly(t, st, "brief", id, longLease)
	finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeDead, Error: "second " + long})
	ids = append(ids, id)

	// Succeeded with a result, where stores keep results.
	if followUps {
		id = insertOne(t, st, "brief.result", withPayload(`[1,2,3]`))
		j = claimOnly(t, st, "brief.result", id, longLease)
		res, err := json.Marshal(map[string]string{"r": strings.Repeat("ü", 500)})
		require.NoError(t, err)
		finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeSucceeded, Result: res})
		ids = append(ids, id)
	}

	// Small and never run: nothing to cut.
	ids = append(ids, insertOne(t, st, "brief", notDue, withPayload(`{}`)))

	whole := map[uuid.UUID]*store.JobRecord{}
	for _, id := range ids {
		whole[id] = get(t, st, id)
	}
	f := store.JobFilter{IDs: ids}
	for _, n := range []int{1, 2, 5, 6, 7, 8, 9, 10, 11, 100, 1001, store.MaxPreviewBytes} {
		page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: f, Order: store.OldestFirst, Limit: 10, PreviewBytes: n})
		require.NoError(t, err, "preview %d", n)
		require.Len(t, page.Jobs, len(ids), "preview %d", n)
		for i, got := range page.Jobs {
			require.Equal(t, ids[i], got.ID)
			want := store.BriefRecord(whole[got.ID], n)
			require.NotNil(t, got.Brief, "preview %d: job %s not in brief", n, got.ID)
			require.LessOrEqual(t, len(got.Brief.Payload), n)
			require.Equal(t, normalized(want), normalized(got), "preview %d, job %s", n, got.ID)
		}
	}

	// Without PreviewBytes, the records are whole.
	page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: f, Order: store.OldestFirst, Limit: 10})
	require.NoError(t, err)
	for _, got := range page.Jobs {
		require.Nil(t, got.Brief)
		requireSameRecord(t, whole[got.ID], got)
	}

	for _, n := range []int{-1, store.MaxPreviewBytes + 1} {
		_, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: f, Limit: 10, PreviewBytes: n})
		require.ErrorIs(t, err, store.ErrInvalidParams, "preview %d", n)
	}
}
