package axhttp

import (
	"context"
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
