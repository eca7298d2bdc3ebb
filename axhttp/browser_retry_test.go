package axhttp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// swappingPage replaces its #content every 10 ms, as the
// dashboard's live refresh (static/app.js) does every few seconds, so
// that many of a test's browser actions find a node gone by their next
// step (often enough to fail every run without the retries, seldom
// enough that a retry gets through under -race).
const swappingPage = `<!doctype html><html><body><div id="content"></div><script>
function swap() {
	document.getElementById("content").innerHTML =
		'<p class="v">value</p><button class="b" onclick="window.clicks=(window.clicks||0)+1">go</button>';
}
swap();
setInterval(swap, 10);
</script></body></html>`

// TestBrowserActionsSurviveSwappedNodes checks that the two helpers every
// browser test reads and clicks through (get and click) try again when a
// refresh swaps out the node they located, instead of failing with
// Chromium's "No node with given id found": a read of the live pages
// failed so in CI. A click tried again is never sent twice (a swap
// between its press and release may lose one, which is the page's doing).
func TestBrowserActionsSurviveSwappedNodes(t *testing.T) {
	ctx := newBrowser(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(swappingPage))
	}))
	t.Cleanup(srv.Close)
	run(t, ctx, "open the page", chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("#content .v")))
	for range 100 {
		// A node read as it is swapped out may already be empty: that the
		// read comes back at all is what this checks.
		require.Contains(t, []string{"value", ""}, get(t, ctx, chromedp.Text(chromedp.CSS("#content .v"))))
	}
	for i := range 10 {
		run(t, ctx, "click", click(chromedp.CSS("#content .b")))
		require.LessOrEqual(t, get(t, ctx, chromedp.Evaluate[int]("window.clicks || 0")), i+1)
	}
}
