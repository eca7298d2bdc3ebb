package axhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
)

var chartRE = regexp.MustCompile(`(?s)<figure class="chart">.*?</figure>`)

// TestOverviewChartsFromStore: the overview's charts come from the
// store, so a server that runs no jobs (as ax serve) and has no Activity
// draws the same throughput, failures and start lag as the host that ran
// them, for the last hour and the last day (issue 25: under ax serve the
// overview had no chart at all).
func TestOverviewChartsFromStore(t *testing.T) {
	f := newFixture(t, fixtureOptions{start: true, setup: func(s *ax.Scheduler) {
		require.NoError(t, ax.Handle(s, "report", func(_ context.Context, _ *ax.Job, p struct{ Fail bool }) error {
			if p.Fail {
				return ax.Permanent(errors.New("template missing"))
			}
			return nil
		}))
	}})
	ctx := context.Background()
	for i := range 7 {
		_, err := f.s.Schedule(ctx, "report", map[string]bool{"Fail": i%3 == 0})
		require.NoError(t, err)
	}
	waitFor(t, "seven reports finished", func() bool {
		n, err := f.s.Admin().Count(ctx, ax.JobFilter{Kinds: []string{"report"}, States: []ax.State{ax.StateSucceeded, ax.StateDead}})
		return err == nil && n == 7
	})

	// Another server on the same store: no Scheduler, no Activity.
	serve, err := New(Config{Store: f.st, Logger: zap.NewNop()})
	require.NoError(t, err)
	srv := httptest.NewServer(serve)
	t.Cleanup(srv.Close)
	other := func(path string) string {
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, res.Body)
		require.Equal(t, http.StatusOK, res.StatusCode)
		return b.String()
	}
	b := f.browser()
	b.login("app", testSecret)
	for _, rng := range []string{"", "?range=day"} {
		t.Run("range"+rng, func(t *testing.T) {
			here := chartRE.FindAllString(b.page("/"+rng), -1)
			there := chartRE.FindAllString(other("/"+rng), -1)
			require.Len(t, here, 2, "one throughput and one lag chart for report")
			require.Equal(t, here, there, "two servers on one store draw different charts")
			require.Contains(t, here[0], "7 jobs finished in the last")
			// Summed over the bars: the jobs may straddle a minute.
			require.Equal(t, 4, sumTitles(here[0], "succeeded"))
			require.Equal(t, 3, sumTitles(here[0], "failed"))
			require.Contains(t, here[1], "largest start lag")
		})
	}
}

// sumTitles adds up the "N what" of a chart's bar titles.
func sumTitles(chart, what string) int {
	n := 0
	for _, m := range regexp.MustCompile(`: (\d+) `+what+`</title>`).FindAllStringSubmatch(chart, -1) {
		k, _ := strconv.Atoi(m[1])
		n += k
	}
	return n
}
