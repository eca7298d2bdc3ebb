package axhttp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserHostileJob: in Chromium, the page of a job whose payload
// and result are nested 9,000 deep (and with 64 KB of metadata and twelve
// 32 KB errors) loads, says the payload was cut, and its link opens the
// whole payload raw, as the store holds it (issue 25 defect 1).
func TestBrowserHostileJob(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t, fixtureOptions{})
	id := hostileJob(t, f.st)
	shot := newShots(t)

	run(t, ctx, "log in",
		chromedp.Navigate(f.base+"/login"),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SendKeys(chromedp.CSS("#key_id"), "dash"),
		chromedp.SendKeys(chromedp.CSS("#secret"), string(readerSecret)),
		click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#overview")))
	run(t, ctx, "open the hostile job",
		chromedp.Navigate(f.base+"/jobs/"+id.String()),
		chromedp.WaitVisible(chromedp.CSS("#payload-cut")),
		chromedp.WaitVisible(chromedp.CSS("#result-cut")),
		chromedp.WaitVisible(chromedp.CSS("#attempts-cut")))
	shot.take(ctx, "job-hostile")
	// The payload and its cut notice as an operator sees them (the
	// screen docs/screenshots/job-hostile.png shows).
	run(t, ctx, "scroll to the payload", chromedp.Evaluate[chromedp.Void](`document.querySelector("#payload").previousElementSibling.scrollIntoView()`))
	top := get(t, ctx, chromedp.CaptureScreenshot())
	require.NoError(t, os.WriteFile(filepath.Join(shot.dir, "job-hostile-top.png"), top, 0o644))
	size := get(t, ctx, chromedp.Evaluate[int](`document.documentElement.outerHTML.length`))
	t.Logf("job page in the browser: %d characters of HTML", size)
	require.Less(t, size, 1<<20)
	href := get(t, ctx, chromedp.Evaluate[string](`document.querySelector("#payload-raw").getAttribute("href")`))
	require.Equal(t, "/ax/jobs/"+id.String()+"/raw/payload", href)

	run(t, ctx, "open the raw payload", click(chromedp.CSS("#payload-raw")))
	waitJS(t, ctx, `location.pathname.endsWith("/raw/payload")`)
	waitJS(t, ctx, `document.body !== null && document.body.innerText.length > 0`)
	text := get(t, ctx, chromedp.Evaluate[string](`document.body.innerText`))
	require.Equal(t, strings.Repeat("[", 9000)+strings.Repeat("]", 9000), strings.TrimSpace(text))
}
