package axhttp

import (
	"context"
	"net/http"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRefreshRenewsNothing: a page's own refreshes (app.js, with
// X-AX-Refresh) do not keep a session alive: a dashboard left open ends
// at the idle timeout, while a person's page views renew it.
func TestRefreshRenewsNothing(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.Clock = clock }})
	b := f.browser()
	b.login("app", testSecret)
	refresh := func() int {
		req, err := http.NewRequest("GET", f.base+"/", nil)
		require.NoError(t, err)
		req.Header.Set(refreshHeader, "1")
		res, err := b.client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	for range 3 { // 30 minutes of refreshes
		now.Add(int64(10 * time.Minute))
		if refresh() != http.StatusOK {
			break
		}
	}
	require.Equal(t, http.StatusSeeOther, refresh(), "refreshes kept an idle session alive")

	b.login("app", testSecret)
	for range 3 {
		now.Add(int64(10 * time.Minute))
		res, _ := b.get("/")
		require.Equal(t, http.StatusOK, res.StatusCode, "page views renew the session")
	}
}

// TestJobListStateTotals: the job list shows, per state, how many jobs
// its other filters select, each linking to them.
func TestJobListStateTotals(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	for range 3 {
		deadJob(t, f.st, "email", "smtp down")
	}
	for range 2 {
		_, err := f.s.Schedule(ctx, "email", nil)
		require.NoError(t, err)
	}
	_, err := f.s.Schedule(ctx, "report", nil)
	require.NoError(t, err)
	b := f.browser()
	b.login("dash", readerSecret)
	page := b.page("/jobs?kind=email&state=dead")
	totals := regexp.MustCompile(`(?s)<p class="totals" id="state-totals">.*?</p>`).FindString(page)
	require.Contains(t, totals, `href="/ax/jobs?kind=email&amp;state=scheduled" class="state scheduled" data-state="scheduled">scheduled 2</a>`)
	require.Contains(t, totals, `class="state dead here" data-state="dead">dead 3</a>`)
	require.Contains(t, totals, `data-state="running">running 0</a>`)
}

func TestRelTime(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Time{}, ""},
		{now.Add(-3 * time.Second), "just now"},
		{now.Add(-45 * time.Second), "45 s ago"},
		{now.Add(-3*time.Minute - time.Second), "3 min ago"},
		{now.Add(-5 * time.Hour), "5 h ago"},
		{now.Add(-72 * time.Hour), "3 d ago"},
		{now.Add(2*time.Hour + time.Minute), "in 2 h"},
	} {
		require.Equal(t, c.want, relTime(c.at))
	}
}
