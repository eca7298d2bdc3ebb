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

// TestTriggerForce: force=true runs the schedule's job even while its
// previous manual run has not ended (ax.ForceTrigger); force=false or
// none keeps the guard; another value is a 400 problem that schedules
// nothing.
func TestTriggerForce(t *testing.T) {
	st := memstore.New()
	_, err := st.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "nightly", Spec: "0 3 * * *",
		Job: &store.InsertParams{Kind: "report", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3}})
	require.NoError(t, err)
	f := newFixture(t, fixtureOptions{store: st}) // not started: the runs stay scheduled
	first := func() TriggerResponse {
		res, body := f.call(&f.app, "POST", APIPrefix+"/periodic/nightly/trigger", "")
		require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
		var tr TriggerResponse
		require.NoError(t, json.Unmarshal(body, &tr))
		require.False(t, tr.Duplicate)
		return tr
	}()
	cases := []struct {
		name      string
		query     string
		status    int
		duplicate bool
		problem   string
	}{
		{"no force", "", http.StatusOK, true, ""},
		{"force false", "?force=false", http.StatusOK, true, ""},
		{"force true", "?force=true", http.StatusOK, false, ""},
		{"force true again", "?force=true", http.StatusOK, false, ""},
		{"bad value", "?force=yes", http.StatusBadRequest, false, `force: want true or false, got \"yes\"`},
	}
	seen := map[string]bool{first.ID.String(): true}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := f.call(&f.app, "POST", APIPrefix+"/periodic/nightly/trigger"+c.query, "")
			require.Equal(t, c.status, res.StatusCode, "%s", body)
			if c.problem != "" {
				require.Contains(t, string(body), c.problem)
				require.Contains(t, string(body), ProblemBadRequest)
				return
			}
			var tr TriggerResponse
			require.NoError(t, json.Unmarshal(body, &tr))
			require.Equal(t, c.duplicate, tr.Duplicate)
			if c.duplicate {
				require.Equal(t, first.ID, tr.ID)
				return
			}
			require.False(t, seen[tr.ID.String()], "a forced run is a new job")
			seen[tr.ID.String()] = true
		})
	}
	n, err := f.s.Admin().Count(t.Context(), store.JobFilter{Kinds: []string{"report"}})
	require.NoError(t, err)
	require.Equal(t, int64(3), n, "the first run and two forced ones")
}
