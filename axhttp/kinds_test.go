package axhttp

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestPauseUnknownKind: a pause of a kind the cluster does not know (no
// jobs, no running node handles it, not paused) is a 404 that stores
// nothing, from the API and the dashboard, "../../jobs" from a path
// included, unless forced; a resume leaves no kind row behind (issue 25
// defect 5: any write key created kind rows that never went away).
func TestPauseUnknownKind(t *testing.T) {
	f := newFixture(t, fixtureOptions{start: true, setup: func(s *ax.Scheduler) {
		require.NoError(t, s.Handle("handled", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	}})
	ctx := context.Background()
	_, err := f.s.Schedule(ctx, "queued", nil, ax.In(1<<40))
	require.NoError(t, err)
	kp := f.st.(store.KindPauser)
	rows := func() []string {
		t.Helper()
		states, err := kp.KindStates(ctx)
		require.NoError(t, err)
		var out []string
		for _, s := range states {
			out = append(out, s.Kind)
		}
		return out
	}
	waitFor(t, "the node registered", func() bool {
		kinds, err := f.s.Admin().Kinds(ctx)
		return err == nil && len(kinds) == 2 && len(kinds[0].Nodes) == 1
	})
	admin := f.browser()
	admin.login("app", testSecret)
	token := admin.csrf("/kinds")

	cases := []struct {
		name   string
		do     func() int
		status int
		rows   []string // paused kinds afterwards
	}{
		{"API: unknown kind", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/ghost/pause", "")
			return res.StatusCode
		}, 404, nil},
		{"API: ../../jobs", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/..%2F..%2Fjobs/pause", "")
			return res.StatusCode
		}, 404, nil},
		{"API: force=yes", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/ghost/pause?force=yes", "")
			return res.StatusCode
		}, 400, nil},
		{"API: unknown parameter", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/ghost/pause?forced=true", "")
			return res.StatusCode
		}, 400, nil},
		{"dashboard: unknown kind", func() int {
			res, _ := admin.post("/kinds/ghost/pause", url.Values{"csrf": {token}})
			return res.StatusCode
		}, 404, nil},
		{"dashboard: ../../jobs", func() int {
			res, _ := admin.post("/kinds/..%2F..%2Fjobs/pause", url.Values{"csrf": {token}})
			return res.StatusCode
		}, 404, nil},
		{"API: resume of an unknown kind", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/ghost/resume", "")
			return res.StatusCode
		}, 200, nil},
		{"API: a kind with jobs", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/queued/pause", "")
			return res.StatusCode
		}, 200, []string{"queued"}},
		{"dashboard: a kind a node handles", func() int {
			res, _ := admin.post("/kinds/handled/pause", url.Values{"csrf": {token}})
			return res.StatusCode
		}, 303, []string{"handled", "queued"}},
		{"API: forced", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/..%2F..%2Fjobs/pause?force=true", "")
			return res.StatusCode
		}, 200, []string{"../../jobs", "handled", "queued"}},
		{"API: pause of a paused kind", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/..%2F..%2Fjobs/pause", "")
			return res.StatusCode
		}, 200, []string{"../../jobs", "handled", "queued"}},
		{"API: resume of the forced kind", func() int {
			res, _ := f.call(&f.app, "POST", APIPrefix+"/kinds/..%2F..%2Fjobs/resume", "")
			return res.StatusCode
		}, 200, []string{"handled", "queued"}},
		{"dashboard: resumes", func() int {
			admin.post("/kinds/handled/resume", url.Values{"csrf": {token}})
			res, _ := admin.post("/kinds/queued/resume", url.Values{"csrf": {token}})
			return res.StatusCode
		}, 303, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.status, c.do())
			require.Equal(t, c.rows, rows())
		})
	}
	// The forced kind, paused and resumed, is on no page.
	kinds, err := f.s.Admin().Kinds(ctx)
	require.NoError(t, err)
	require.Len(t, kinds, 2, "%v", kinds)
	for _, p := range []string{"/", "/kinds"} {
		_, page := admin.get(p)
		require.False(t, strings.Contains(page, "../../jobs") || strings.Contains(page, "ghost"), p)
	}
}

// TestKindsUnhandled: a kind whose jobs have been due for the grace with
// no running node handling it is marked unhandled on the Kinds page (a
// badge on its row, an alert naming it) and in the API's kinds; handled
// kinds are not.
func TestKindsUnhandled(t *testing.T) {
	var offset atomic.Int64 // store clock minus real time
	st := memstore.New(memstore.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
	ctx := context.Background()
	// A worker that handles email registered an hour ago, and still runs.
	offset.Store(int64(-time.Hour))
	require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker", Kinds: []string{"email"}, TTL: 2 * time.Hour}))
	offset.Store(0)
	f := newFixture(t, fixtureOptions{store: st})
	for _, kind := range []string{"email", "emial"} {
		_, err := f.s.Schedule(ctx, kind, nil, ax.At(time.Now().Add(-10*time.Minute)))
		require.NoError(t, err)
	}
	admin := f.browser()
	admin.login("app", testSecret)
	_, page := admin.get("/kinds")
	res, body := f.call(&f.app, "GET", APIPrefix+"/kinds", "")
	require.Equal(t, 200, res.StatusCode, "%s", body)
	var api []ax.KindState
	require.NoError(t, json.Unmarshal(body, &api))
	unhandled := map[string]bool{}
	for _, k := range api {
		unhandled[k.Kind] = k.Unhandled
	}
	require.Equal(t, map[string]bool{"email": false, "emial": true}, unhandled)
	for _, c := range []struct {
		name, want string
	}{
		{"the alert names the kind", `1 kind(s) with jobs due that no running node handles: <a href="#kind-emial">emial</a>`},
		{"the misspelt kind's row has the badge", `<tr id="kind-emial">`},
	} {
		require.Contains(t, page, c.want, c.name)
	}
	require.Equal(t, 1, strings.Count(page, `<span class="badge unhandled"`), "only the unhandled kind has the badge")
	_, overview := admin.get("/")
	require.Equal(t, 1, strings.Count(overview, `<span class="badge unhandled"`), "the overview marks it too")
	row := page[strings.Index(page, `<tr id="kind-emial">`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, `badge unhandled`)
}

// TestSubmitUnknownKind: with ax.Config.RefuseUnknownKinds, a job of a
// kind no node handles is a 400 naming the kind, and nothing is stored;
// a handled kind is accepted.
func TestSubmitUnknownKind(t *testing.T) {
	f := newFixture(t, fixtureOptions{
		setup: func(s *ax.Scheduler) {
			require.NoError(t, s.Handle("email", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
		},
		schedCfg: func(c *ax.Config) { c.RefuseUnknownKinds = true },
	})
	cases := []struct {
		body   string
		status int
		detail string
	}{
		{`{"kind":"email","delay":"1h"}`, 201, ""},
		{`{"kind":"emial","delay":"1h"}`, 400, `job kind unknown to the cluster: \"emial\"`},
		{`{"jobs":[{"kind":"email"},{"kind":"emial"}]}`, 400, `job kind unknown to the cluster`},
	}
	for _, c := range cases {
		path := APIPrefix + "/jobs"
		if strings.HasPrefix(c.body, `{"jobs"`) {
			path += "/batch"
		}
		res, body := f.call(&f.app, "POST", path, c.body)
		require.Equal(t, c.status, res.StatusCode, "%s: %s", c.body, body)
		require.Contains(t, string(body), c.detail, c.body)
	}
	n, err := f.s.Admin().Count(context.Background(), ax.JobFilter{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the handled kind's job is stored")
}
