package axhttp

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestTriggerDuplicate: a trigger while the schedule's previous manual
// run has not ended schedules nothing and says so (ax.Admin.TriggerSchedule's
// guard); the answer names that run.
func TestTriggerDuplicate(t *testing.T) {
	st := memstore.New()
	_, err := st.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "nightly", Spec: "0 3 * * *",
		Job: &store.InsertParams{Kind: "report", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3}})
	require.NoError(t, err)
	f := newFixture(t, fixtureOptions{store: st}) // not started: the run stays scheduled
	var got []TriggerResponse
	for range 2 {
		res, body := f.call(&f.app, "POST", APIPrefix+"/periodic/nightly/trigger", "")
		require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
		var tr TriggerResponse
		require.NoError(t, json.Unmarshal(body, &tr))
		got = append(got, tr)
	}
	require.False(t, got[0].Duplicate)
	require.Equal(t, TriggerResponse{ID: got[0].ID, Duplicate: true}, got[1])
}
