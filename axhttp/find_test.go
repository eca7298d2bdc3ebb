package axhttp

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestFindJob: a whole ID or a prefix that one job has opens the job; a prefix several have lists them; none, or a malformed
// one, says so.
func TestFindJob(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	var ids []uuid.UUID
	for range 20 {
		j, err := f.s.Schedule(ctx, "email", nil)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	b := f.browser()
	b.login("dash", readerSecret)
	last := ids[len(ids)-1].String()
	// The shortest prefix only the last job has.
	unique := ""
	for n := 4; n <= len(last); n++ {
		p, count := last[:n], 0
		for _, id := range ids {
			if strings.HasPrefix(id.String(), p) {
				count++
			}
		}
		if count == 1 {
			unique = p
			break
		}
	}
	cases := []struct {
		name, q  string
		status   int
		location string
		contains string
	}{
		{"whole ID", last, 303, "/ax/jobs/" + last, ""},
		{"whole ID in capitals", strings.ToUpper(last), 303, "/ax/jobs/" + last, ""},
		{"unique prefix", unique, 303, "/ax/jobs/" + last, ""},
		{"as a page shows it", unique + "…" + last[30:], 303, "/ax/jobs/" + last, ""},
		{"shared prefix", last[:4], 200, "", "The IDs of 20 jobs start with"},
		{"no match", "ffff", 404, "", "ID starts with ffff."},
		{"unknown whole ID", uuid.NewString(), 404, "", "No job has this ID."},
		{"too short", last[:3], 400, "", "at least its first 4"},
		{"not hexadecimal", "<script>", 400, "", "at least its first 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := b.get("/find?id=" + url.QueryEscape(c.q))
			require.Equal(t, c.status, res.StatusCode, body)
			if c.location != "" {
				require.Equal(t, c.location, res.Header.Get("Location"))
			}
			require.Contains(t, body, c.contains)
			require.NotContains(t, body, "<script>")
		})
	}
	_, page := b.get("/jobs")
	require.Contains(t, page, `id="find-form"`)
}

// TestFindOldJob: a prefix finds a job older than a whole listing of
// newer ones (store.MaxListLimit), and a prefix more jobs share than a
// page lists says there are more.
func TestFindOldJob(t *testing.T) {
	st := memstore.New()
	old := uuid.MustParse("01000000-0000-7000-8000-000000000001")
	params := []store.InsertParams{{ID: old, Kind: "email", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 1, Delay: 1 << 40}}
	for i := range findShown + 1 { // older still, all sharing 0000
		params = append(params, store.InsertParams{ID: uuid.MustParse(fmt.Sprintf("00000000-%04x-7000-8000-000000000000", i)),
			Kind: "email", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 1, Delay: 1 << 40})
	}
	_, err := st.Insert(t.Context(), params)
	require.NoError(t, err)
	f := newFixture(t, fixtureOptions{store: st})
	for range store.MaxListLimit {
		_, err := f.s.Schedule(t.Context(), "email", nil)
		require.NoError(t, err)
	}
	b := f.browser()
	b.login("dash", readerSecret)
	res, body := b.get("/find?id=0100")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, "/ax/jobs/"+old.String(), res.Header.Get("Location"))
	res, body = b.get("/find?id=0000")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, fmt.Sprintf("The IDs of more than %d jobs start with", findShown))
}

// TestFindPageBounded: the find page reads the jobs a prefix names in
// brief, as the listings do (TestListingsBounded): a prefix that names
// every one of listBoundJobs dead jobs with 1 MB payloads costs the
// server megabytes, not one per job.
func TestFindPageBounded(t *testing.T) {
	n := listBoundCount()
	st := memstore.New()
	fillDead(t, st, n)
	page, err := st.ListJobs(t.Context(), &store.ListJobsParams{Limit: 1, PreviewBytes: 1})
	require.NoError(t, err)
	// UUIDv7: jobs made within 49 days share their first 4 digits.
	prefix := page.Jobs[0].ID.String()[:4]
	f := newFixture(t, fixtureOptions{store: st})
	b := f.browser()
	b.login("app", testSecret)
	var res *http.Response
	var body string
	alloc, took := measured(func() { res, body = b.get("/find?id=" + prefix) })
	t.Logf("find, %d jobs of 1 MB: %d bytes sent, %.1f MB allocated, %s", n, len(body), float64(alloc)/(1<<20), took)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, fmt.Sprintf("The IDs of %d jobs start with", n))
	require.Less(t, alloc, uint64(listBoundFixed+n*listBoundPerJob))
	require.Less(t, len(body), n*listBoundBodyPerJob+64<<10)
	require.Less(t, took, listBoundTime)
}
