package axhttp

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var hrefRE = regexp.MustCompile(`href="([^"]*)"`)

// TestOverviewLinks: every link of the overview answers 200, and each
// count links to the job list of its kind and state, which counts the
// same number (issue 25 defect 7: "8 dead" linked to state=8).
func TestOverviewLinks(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	for range 3 {
		deadJob(t, f.st, "email", "smtp down")
	}
	for _, kind := range []string{"email", "report", "odd kind/with?a=b&c"} {
		_, err := f.s.Schedule(ctx, kind, nil)
		require.NoError(t, err)
	}
	b := f.browser()
	b.login("app", testSecret)
	res, body := b.get("/")
	require.Equal(t, http.StatusOK, res.StatusCode, body)

	links := hrefRE.FindAllStringSubmatch(body, -1)
	require.NotEmpty(t, links)
	counts := 0
	for _, m := range links {
		link := html.UnescapeString(m[1])
		require.True(t, strings.HasPrefix(link, "/ax/"), "link %q leaves the mount point", link)
		t.Run(link, func(t *testing.T) {
			res, page := b.get(strings.TrimPrefix(link, "/ax"))
			require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", link, page)
		})
		if strings.Contains(link, "state=") {
			counts++
		}
	}
	require.Equal(t, 4, counts, "one count link per kind and state with jobs: 3 scheduled, 1 dead")

	// The dead count of email leads to its three dead jobs.
	m := regexp.MustCompile(`href="(/ax/jobs\?kind=email&amp;state=dead)">3</a>`).FindStringSubmatch(body)
	require.NotNil(t, m, "no link from the 3 dead emails to their list")
	_, page := b.get(strings.TrimPrefix(html.UnescapeString(m[1]), "/ax"))
	require.Equal(t, 3, strings.Count(page, `class="job state-dead"`), page)
}

var kindRowRE = regexp.MustCompile(`<tr id="kind-([^"]+)">`)

// TestOverviewTroubleFirstBounded: the overview lists the kinds in
// trouble first (dead jobs, most first), and at most overviewKindsShown
// of them, saying how many more there are, so a key that created
// thousands of kinds does not make a page of megabytes that reloads every
// few seconds. (Issue 41: 20,000 kinds made a 19.8 MB page, in name
// order.)
func TestOverviewTroubleFirstBounded(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	const shown = 200 // overviewKindsShown
	for i := range shown + 50 {
		_, err := f.s.Schedule(ctx, fmt.Sprintf("k%03d", i), nil)
		require.NoError(t, err)
	}
	deadJob(t, f.st, "zz.few", "boom")
	for range 2 {
		deadJob(t, f.st, "zz.many", "boom")
	}
	b := f.browser()
	b.login("app", testSecret)
	res, body := b.get("/")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	rows := kindRowRE.FindAllStringSubmatch(body, -1)
	require.Len(t, rows, shown)
	require.Equal(t, "zz.many", rows[0][1])
	require.Equal(t, "zz.few", rows[1][1])
	require.Equal(t, "k000", rows[2][1])
	require.Contains(t, body, "52 more kind(s)")
}

// TestKindsPageBounded: the kinds page lists at most kindsShown kinds,
// says how many more there are, and filters by the start of their name.
// (Issue 41: a key that created 20,000 kinds made every such page
// megabytes.)
func TestKindsPageBounded(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	const shown = 500 // kindsShown
	for i := range shown + 10 {
		_, err := f.s.Schedule(ctx, fmt.Sprintf("k%03d", i), nil)
		require.NoError(t, err)
	}
	b := f.browser()
	b.login("app", testSecret)
	res, body := b.get("/kinds")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Len(t, kindRowRE.FindAllString(body, -1), shown)
	require.Contains(t, body, "10 more kind(s) not shown")
	_, body = b.get("/kinds?prefix=k50")
	require.Len(t, kindRowRE.FindAllString(body, -1), 10)
}
