package axhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// The case (issue 41): a write key created 20,000 kinds in 20
// requests, and GET /api/v1/kinds and GET /api/v1/stats answered with all
// of them. Each answer is now bounded (KindsLimit kinds unless limit says
// otherwise, MaxKindsLimit and MaxKindsBytes at most) and says it was cut.

const (
	manyKinds = 20000
	// kindsBodyDefault bounds an answer of the default limit over kinds
	// with short names; kindsBodyMax bounds any answer, whatever the
	// limit and the names (MaxKindsBytes of kinds, and the rest).
	kindsBodyDefault = 128 << 10
	kindsBodyMax     = 1<<20 + 4<<10
)

// fillKinds inserts one due job of each of n kinds named name(i), and
// one dead job of kind "zz.dead", into st.
func fillKinds(t *testing.T, st store.Store, n int, name func(int) string) {
	t.Helper()
	for done := 0; done < n; {
		ps := make([]store.InsertParams, min(n-done, 1000))
		for i := range ps {
			ps[i] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: name(done + i), Payload: []byte(`{}`), Priority: 2, MaxAttempts: 1}
		}
		_, err := st.Insert(t.Context(), ps)
		require.NoError(t, err)
		done += len(ps)
	}
	deadJob(t, st, "zz.dead", "boom")
}

var nextLinkRE = regexp.MustCompile(`^<([^>]+)>; rel="next"$`)

// statsCut is the bound part of a GET /api/v1/stats answer.
type statsCut struct {
	KindsTotal *int                        `json:"kinds_total"`
	Truncated  *bool                       `json:"truncated"`
	Queue      map[string]map[string]int64 `json:"queue"`
}

func TestKindsAndStatsBounded(t *testing.T) {
	names := []struct {
		name string
		kind func(int) string
	}{
		{"short names", func(i int) string { return fmt.Sprintf("k.%05d", i) }},
		{"names of 250 bytes", func(i int) string { return strings.Repeat("x", 245) + fmt.Sprintf("%05d", i) }},
	}
	for _, nc := range names {
		t.Run(nc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			fillKinds(t, f.st, manyKinds, nc.kind)
			total := strconv.Itoa(manyKinds + 1)
			kindsCut := func(t *testing.T, res *http.Response, body []byte, want int) {
				var ks []map[string]any
				require.NoError(t, json.Unmarshal(body, &ks), "an array, as before")
				require.Len(t, ks, want)
				require.Equal(t, total, res.Header.Get("X-Total-Count"))
				require.Regexp(t, nextLinkRE, res.Header.Get("Link"), "names the next page")
			}
			statsCutOK := func(t *testing.T, body []byte, want int) {
				var st statsCut
				require.NoError(t, json.Unmarshal(body, &st))
				require.Equal(t, manyKinds+1, *st.KindsTotal)
				require.True(t, *st.Truncated)
				require.Len(t, st.Queue, want)
				require.Contains(t, st.Queue, "zz.dead", "trouble first")
			}
			api := func(path string) (*http.Response, []byte) { return f.call(&f.app, http.MethodGet, path, "") }
			b := f.browser()
			b.login("app", testSecret)
			page := func(path string) (*http.Response, []byte) {
				res, body := b.get(path)
				return res, []byte(body)
			}
			pageCut := func(say string) func(t *testing.T, _ *http.Response, body []byte) {
				return func(t *testing.T, _ *http.Response, body []byte) { require.Contains(t, string(body), say) }
			}
			requests := []struct {
				path  string
				get   func(path string) (*http.Response, []byte)
				bound int
				cut   func(t *testing.T, res *http.Response, body []byte)
			}{
				{"/api/v1/kinds", api, kindsBodyMax, func(t *testing.T, res *http.Response, body []byte) { kindsCut(t, res, body, 500) }},
				{"/api/v1/kinds?limit=5000", api, kindsBodyMax, func(t *testing.T, res *http.Response, body []byte) {
					require.Contains(t, res.Header.Get("Link"), "limit=5000")
					require.Regexp(t, nextLinkRE, res.Header.Get("Link"))
				}},
				{"/api/v1/stats", api, kindsBodyMax, func(t *testing.T, _ *http.Response, body []byte) { statsCutOK(t, body, 500) }},
				{"/api/v1/stats?limit=5000", api, kindsBodyMax, func(t *testing.T, _ *http.Response, body []byte) {
					var st statsCut
					require.NoError(t, json.Unmarshal(body, &st))
					require.True(t, *st.Truncated)
					require.Contains(t, st.Queue, "zz.dead", "trouble first")
				}},
				// The pages bound their rows (overviewKindsShown,
				// kindsShown): a row is a few hundred bytes of HTML.
				{"/", page, kindsBodyMax, pageCut(fmt.Sprintf("%d more kind(s)", manyKinds+1-200))},
				{"/kinds", page, kindsBodyMax, pageCut(fmt.Sprintf("%d more kind(s) not shown", manyKinds+1-500))},
				{"/dead", page, kindsBodyMax, pageCut("zz.dead")},
			}
			for _, rq := range requests {
				start := time.Now()
				res, body := rq.get(rq.path)
				t.Logf("%s over %d kinds: %d bytes, %s", rq.path, manyKinds, len(body), time.Since(start))
				require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", rq.path, body)
				require.Less(t, len(body), rq.bound, rq.path)
				rq.cut(t, res, body)
			}
		})
	}
}

// TestKindsBoundDefault: with short names, answers of the default limit
// stay under kindsBodyDefault.
func TestKindsBoundDefault(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	fillKinds(t, f.st, manyKinds, func(i int) string { return fmt.Sprintf("k.%05d", i) })
	for _, path := range []string{"/api/v1/kinds", "/api/v1/stats"} {
		res, body := f.call(&f.app, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, body)
		require.Less(t, len(body), kindsBodyDefault, path)
	}
}

// TestKindsPages: following the Link headers of GET /api/v1/kinds reads
// every kind once, in name order; prefix= pages within the prefix.
func TestKindsPages(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	fillKinds(t, f.st, manyKinds, func(i int) string { return fmt.Sprintf("k.%05d", i) })
	cases := []struct {
		first string
		want  int
		pages int
	}{
		{"/api/v1/kinds?limit=5000", manyKinds + 1, 5},
		{"/api/v1/kinds?prefix=k.1&limit=3000", 10000, 4},
		{"/api/v1/kinds?prefix=k.199", 100, 1},
		{"/api/v1/kinds?after=k.19997&limit=2", 3, 2},
	}
	for _, c := range cases {
		var got []string
		pages := 0
		for path := c.first; path != ""; pages++ {
			res, body := f.call(&f.app, http.MethodGet, path, "")
			require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, body)
			var ks []struct{ Kind string }
			require.NoError(t, json.Unmarshal(body, &ks))
			for _, k := range ks {
				got = append(got, k.Kind)
			}
			path = ""
			if m := nextLinkRE.FindStringSubmatch(res.Header.Get("Link")); m != nil {
				path = strings.TrimPrefix(m[1], "/ax")
			}
		}
		require.Len(t, got, c.want, c.first)
		require.IsIncreasing(t, got, c.first)
		require.Equal(t, c.pages, pages, c.first)
	}
}

// TestStatsSelect: GET /api/v1/stats reads the kinds named (kind=) or of
// a prefix, whole when they fit.
func TestStatsSelect(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	fillKinds(t, f.st, 2000, func(i int) string { return fmt.Sprintf("k.%05d", i) })
	cases := []struct {
		path      string
		want      []string
		total     int
		truncated bool
	}{
		{"/api/v1/stats?kind=k.01999,zz.dead", []string{"k.01999", "zz.dead"}, 2, false},
		{"/api/v1/stats?prefix=k.0199", []string{"k.01990", "k.01991", "k.01992", "k.01993", "k.01994", "k.01995", "k.01996", "k.01997", "k.01998", "k.01999"}, 10, false},
		{"/api/v1/stats?prefix=k.0199&limit=2", []string{"k.01990", "k.01991"}, 10, true},
		{"/api/v1/stats?limit=1", []string{"zz.dead"}, 2001, true},
	}
	for _, c := range cases {
		res, body := f.call(&f.app, http.MethodGet, c.path, "")
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", c.path, body)
		var st statsCut
		require.NoError(t, json.Unmarshal(body, &st))
		var got []string
		for k := range st.Queue {
			got = append(got, k)
		}
		require.ElementsMatch(t, c.want, got, c.path)
		require.Equal(t, c.total, *st.KindsTotal, c.path)
		require.Equal(t, c.truncated, *st.Truncated, c.path)
	}
}

// TestKindsParams: the limit is checked, and so are the parameters'
// names.
func TestKindsParams(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, path := range []string{
		"/api/v1/kinds?limit=0", "/api/v1/kinds?limit=5001", "/api/v1/kinds?limit=x", "/api/v1/kinds?bogus=1",
		"/api/v1/stats?limit=0", "/api/v1/stats?limit=5001", "/api/v1/stats?after=k",
	} {
		res, body := f.call(&f.app, http.MethodGet, path, "")
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: %s", path, body)
	}
}

// TestPartitionsBounded: GET /api/v1/kinds/{kind}/partitions pages as
// GET /api/v1/kinds does, so a kind whose jobs name 20,000 failing
// partitions answers a bounded page that says there is more; the
// partition of the jobs without a key ("") pages like any other.
func TestPartitionsBounded(t *testing.T) {
	f := newFixture(t, fixtureOptions{
		setup: func(s *ax.Scheduler) {
			require.NoError(t, ax.Handle(s, "report", func(context.Context, *ax.Job, json.RawMessage) error { return nil },
				ax.PartitionBreaker(ax.PartitionByMetadata("tenant"), ax.BreakerConfig{Failures: 3})))
		},
		start: true,
	})
	ps := f.st.(store.PartitionBreakerStore)
	keys := []string{""}
	for i := range manyKinds {
		keys = append(keys, strings.Repeat("t", 200)+fmt.Sprintf("%05d", i))
	}
	for _, k := range keys {
		_, err := ps.SetPartitionBreaker(t.Context(), "report", k, true)
		require.NoError(t, err)
	}
	total := strconv.Itoa(len(keys))
	cases := []struct {
		path  string
		want  int    // partitions in the page
		first string // the page's first key
		next  string // the next page's after
	}{
		{"/api/v1/kinds/report/partitions", 500, "", keys[499]},
		{"/api/v1/kinds/report/partitions?limit=1", 1, "", ""},
		{"/api/v1/kinds/report/partitions?limit=2&after=", 2, keys[1], keys[2]},
	}
	for _, c := range cases {
		res, body := f.call(&f.app, http.MethodGet, c.path, "")
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", c.path, body)
		require.Less(t, len(body), kindsBodyMax, c.path)
		var list []ax.PartitionBreakerState
		require.NoError(t, json.Unmarshal(body, &list))
		require.Len(t, list, c.want, c.path)
		require.Equal(t, c.first, list[0].PartitionKey, c.path)
		require.Equal(t, total, res.Header.Get("X-Total-Count"), c.path)
		m := nextLinkRE.FindStringSubmatch(res.Header.Get("Link"))
		require.NotNil(t, m, "%s: names the next page", c.path)
		next, err := url.Parse(m[1])
		require.NoError(t, err)
		require.Equal(t, []string{c.next}, next.Query()["after"], c.path)
	}
	// The largest page stops at MaxKindsBytes of partitions.
	res, body := f.call(&f.app, http.MethodGet, "/api/v1/kinds/report/partitions?limit=5000", "")
	require.Equal(t, http.StatusOK, res.StatusCode)
	t.Logf("limit=5000 over %d partitions with keys of 205 bytes: %d bytes", len(keys), len(body))
	require.Less(t, len(body), kindsBodyMax)
	require.Regexp(t, nextLinkRE, res.Header.Get("Link"))
}

// TestOpenAPIKindsBounds: openapi.json states the bounds of the paged
// routes as the code applies them (KindsLimit, MaxKindsLimit,
// MaxKindsBytes), so the document cannot drift from the constants.
func TestOpenAPIKindsBounds(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
				Schema      struct {
					Minimum int `json:"minimum"`
					Maximum int `json:"maximum"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openAPIDoc, &doc))
	require.Equal(t, 1<<20, MaxKindsBytes, "the document says 1 MiB")
	for _, path := range []string{"/api/v1/kinds", "/api/v1/stats", "/api/v1/kinds/{kind}/partitions"} {
		found := 0
		for _, p := range doc.Paths[path]["get"].Parameters {
			if p.Name != "limit" {
				continue
			}
			found++
			require.Equal(t, 1, p.Schema.Minimum, path)
			require.Equal(t, MaxKindsLimit, p.Schema.Maximum, path)
			require.Contains(t, p.Description, fmt.Sprintf("1 to %d (default %d)", MaxKindsLimit, KindsLimit), path)
			require.Contains(t, p.Description, "1 MiB", path)
		}
		require.Equal(t, 1, found, "%s documents its limit", path)
	}
}
