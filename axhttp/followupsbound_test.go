package axhttp

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// followUpsMade is how many Then jobs of 1 MB the parent's end inserts in
// TestFollowUpsBounded: more than a job's page shows, fewer than the
// API's default page.
const followUpsMade = 60

// TestFollowUpsBounded (issue 41): the jobs a job's end inserted are
// listed by page and in brief, as every other listing: GET
// /api/v1/jobs/{id}/followups and the job's page read kilobytes per job
// however large the follow-ups are, and the job's page shows the first
// FollowUpsShown with a link to the rest. Both read them whole, every
// one, before: 60 MB for this parent.
func TestFollowUpsBounded(t *testing.T) {
	st := memstore.New()
	ctx := t.Context()
	parent := store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "fanout", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 1}
	_, err := st.Insert(ctx, []store.InsertParams{parent})
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n1", Limit: 1, LeaseDuration: time.Hour, Kinds: []store.KindLimit{{Kind: "fanout", Limit: 1}}})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	then := make([]store.InsertParams, followUpsMade)
	payload := bigPayload()
	for i := range then {
		then[i] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "bulk.mail", Payload: payload, Priority: store.PriorityNormal, MaxAttempts: 1}
	}
	ok, err := st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: parent.ID, Token: res.Jobs[0].LeaseToken},
		Outcome: store.OutcomeSucceeded, Then: then}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)

	f := newFixture(t, fixtureOptions{store: st})
	b := f.browser()
	b.login("app", testSecret)
	budget := uint64(listBoundFixed + followUpsMade*listBoundPerJob)
	path := "/api/v1/jobs/" + parent.ID.String() + "/followups"

	var page FollowUpsResponse
	alloc, took := measured(func() {
		r, body := f.call(&f.app, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, r.StatusCode, string(body))
		require.Less(t, len(body), followUpsMade*listBoundBodyPerJob+64<<10, "bytes sent")
		require.NoError(t, json.Unmarshal(body, &page))
	})
	require.Less(t, alloc, budget, "allocated by the API's answer")
	require.Less(t, took, listBoundTime)
	require.Len(t, page.Jobs, followUpsMade)
	require.Empty(t, page.Cursor, "one page holds them all")
	for _, j := range page.Jobs {
		require.Contains(t, []string{"", "null"}, string(j.Payload), "listed in brief")
		require.NotNil(t, j.Brief)
	}

	seen := map[uuid.UUID]bool{}
	for cursor, pages := "", 0; ; pages++ {
		require.Less(t, pages, 10)
		r, body := f.call(&f.app, http.MethodGet, path+"?limit=25&cursor="+cursor, "")
		require.Equal(t, http.StatusOK, r.StatusCode, string(body))
		var p FollowUpsResponse
		require.NoError(t, json.Unmarshal(body, &p))
		require.LessOrEqual(t, len(p.Jobs), 25)
		for _, j := range p.Jobs {
			require.False(t, seen[j.ID], "listed twice")
			seen[j.ID] = true
		}
		if cursor = p.Cursor; cursor == "" {
			break
		}
	}
	require.Len(t, seen, followUpsMade, "the pages list every follow-up once")

	r, body := f.call(&f.app, http.MethodGet, path+"?limit=5000", "")
	require.Equal(t, http.StatusBadRequest, r.StatusCode, string(body))

	alloc, _ = measured(func() {
		res, body := b.get("/jobs/" + parent.ID.String())
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, FollowUpsShown, strings.Count(string(body), `class="state-`), "follow-up rows")
		require.Contains(t, string(body), `id="followups-more"`)
	})
	require.Less(t, alloc, budget, "allocated by the job's page")
}
