package axhttp

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserLive: in Chromium, an open dead letters page shows a job
// that died after it loaded without a reload (the page's script swapped
// the content in), with its time relative beside the absolute one; while
// a box is ticked it does not refresh; the job list shows per-state
// totals.
func TestBrowserLive(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.RefreshInterval = 300 * time.Millisecond }})
	run(t, ctx, "log in",
		chromedp.Navigate(f.base+"/login"),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SendKeys(chromedp.CSS("#key_id"), "app"),
		chromedp.SendKeys(chromedp.CSS("#secret"), string(testSecret)),
		click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#overview")))
	run(t, ctx, "open the dead letters",
		chromedp.Navigate(f.base+"/dead"),
		chromedp.WaitVisible(chromedp.CSS("#dead-count")),
		chromedp.Evaluate[chromedp.Void](`window.axMark = 1`))
	require.Contains(t, textOf(t, ctx, "#dead-count"), "0 dead job(s)")

	deadJob(t, f.st, "mailer", "smtp: 550 mailbox full")
	waitJS(t, ctx, `document.querySelector("#dead-groups") !== null`)
	require.Equal(t, 1, get(t, ctx, chromedp.Evaluate[int](`window.axMark`)), "the page was reloaded, not refreshed")
	ago := textOf(t, ctx, "#dead-list time + .ago")
	require.Contains(t, []string{"just now", "10 s ago", "11 s ago", "12 s ago"}, ago)

	// A ticked box holds the page as it is.
	run(t, ctx, "tick a job", click(chromedp.CSS(`#dead-list input[name="id"]`)))
	deadJob(t, f.st, "mailer", "smtp: 550 mailbox full")
	before := get(t, ctx, chromedp.Evaluate[string](`document.documentElement.getAttribute("data-refreshed") || ""`))
	time.Sleep(1500 * time.Millisecond) // five refresh intervals
	require.Equal(t, before, get(t, ctx, chromedp.Evaluate[string](`document.documentElement.getAttribute("data-refreshed") || ""`)))
	require.Contains(t, textOf(t, ctx, "#dead-count"), "1 dead job(s)")
	run(t, ctx, "untick it", click(chromedp.CSS(`#dead-list input[name="id"]`)))
	waitJS(t, ctx, `document.querySelector("#dead-count").textContent.indexOf("2 dead job(s)") >= 0`)

	run(t, ctx, "open the job list",
		chromedp.Navigate(f.base+"/jobs?kind=mailer"),
		chromedp.WaitVisible(chromedp.CSS("#state-totals")))
	require.Contains(t, textOf(t, ctx, `#state-totals [data-state="dead"]`), "dead 2")
}

// textOf reads the text of the element sel names in one script, so a
// refresh that swaps the page's content cannot land between finding the
// node and reading it.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	b, err := json.Marshal(sel)
	require.NoError(t, err)
	return get(t, ctx, chromedp.Evaluate[string](`(function(){var e=document.querySelector(`+string(b)+`);return e?e.textContent:"";})()`))
}
