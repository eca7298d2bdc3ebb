package axhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// Browser tests drive the dashboard in headless Chromium (Debian's
// chromium package) with chromedp. Without a Chromium binary they skip,
// unless AX_REQUIRE_BROWSER=1 (CI), where they fail. Each page visited is
// saved as a PNG under $AX_SCREENSHOTS/<test>, or the test's artifact
// directory (go test -artifacts keeps it), and its path is logged.

// chromiumPath finds the browser: $AX_CHROMIUM, or a chromium binary on
// the PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AX_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium binary found (apt-get install chromium, or set AX_CHROMIUM); set AX_REQUIRE_BROWSER=1 to fail instead of skipping"
	if os.Getenv("AX_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts headless Chromium with a fresh profile and returns a
// tab's context, closed (and the browser ended) when the test ends.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	bin := chromiumPath(t)
	profile := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1360, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancelTab()
		cancelAlloc()
	})
	// Start the browser now, so a broken install fails here.
	require.NoError(t, chromedp.Do(ctx), "start %s", bin)
	return ctx
}

// shots saves screenshots of a browser test.
type shots struct {
	t   *testing.T
	dir string
	n   int
}

func newShots(t *testing.T) *shots {
	dir := t.ArtifactDir()
	if d := os.Getenv("AX_SCREENSHOTS"); d != "" {
		dir = filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_"))
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	return &shots{t: t, dir: dir}
}

// take saves the page as NN-name.png.
func (s *shots) take(ctx context.Context, name string) {
	s.t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(s.t, err)
	s.n++
	path := filepath.Join(s.dir, fmt.Sprintf("%02d-%s.png", s.n, name))
	require.NoError(s.t, os.WriteFile(path, png, 0o644))
	s.t.Logf("screenshot: %s", path)
}

// run runs browser actions with a deadline.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(tctx, actions...), what)
}

// click is chromedp.Click, tried again while a live page's refresh swaps
// the node out from under it (static/app.js replaces #content): Chromium
// then answers that the node is gone (nodeReplaced) from the steps that locate
// the node (scroll into view, content quads), before any mouse event is
// sent, so trying again never clicks twice.
func click[S chromedp.Selectable](sel S, opts ...chromedp.QueryOption) chromedp.Action[chromedp.Void] {
	c := chromedp.Click(sel, opts...)
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		for {
			v, err := c(ctx, tg)
			if err == nil || !nodeReplaced(err) || ctx.Err() != nil {
				return v, err
			}
			select {
			case <-ctx.Done():
				return v, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// get runs one browser action that reads a value. A read that lands
// while the page navigates fails with "Cannot find context" (its
// JavaScript context was torn down under it), and one that lands while a
// live page's refresh swaps its node out fails as click's does; reads are
// idempotent, so get tries again on both until the deadline.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		v, err := chromedp.Run(tctx, a)
		if err == nil || !(navigating(err) || nodeReplaced(err)) || tctx.Err() != nil {
			require.NoError(t, err)
			return v
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// navigating reports whether err is Chromium saying the page it read
// from went away during a navigation.
func navigating(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed") ||
		strings.Contains(msg, "Inspected target navigated or closed")
}

// nodeReplaced reports whether err is Chromium saying the node an action
// had located is gone: the live page's refresh replaced it. Chromium's
// DOM methods word this two ways.
func nodeReplaced(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "No node with given id found") ||
		strings.Contains(msg, "Could not find node with given id")
}

// waitJS waits until the JavaScript expression is true on the current
// page, across navigations.
func waitJS(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !get(t, ctx, chromedp.Evaluate[bool](expr)) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", expr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrowserDashboard runs the operator scenario in Chromium on
// memstore.
func TestBrowserDashboard(t *testing.T) {
	ctx := newBrowser(t)
	browserScenario(t, ctx, nil)
}

// TestBrowserDashboardPostgres runs the same scenario on PostgreSQL. The
// operator interfaces are checked when the test runs, not at compile
// time, so that this module's tests still build against a core module
// whose pgstore lacks them (and fail, saying why).
func TestBrowserDashboardPostgres(t *testing.T) {
	var pg store.Store = (*pgstore.Store)(nil)
	_, inspects := pg.(store.JobInspector)
	_, bulk := pg.(store.BulkController)
	_, pauses := pg.(store.KindPauser)
	_, periodic := pg.(store.PeriodicController)
	if !inspects || !bulk || !pauses || !periodic {
		t.Fatal("pgstore does not implement the operator interfaces the dashboard needs (store.JobInspector, store.BulkController, store.KindPauser, store.PeriodicController)")
	}
	ctx := newBrowser(t)
	st, _ := axtest.Postgres(t)
	browserScenario(t, ctx, st)
}

// browserScenario: an operator logs in, sees the overview, filters the
// job list down to dead jobs, opens one, retries it and sees it succeed;
// pauses a kind and sees a new job of it wait, resumes it and sees the
// job run; and looks at the dead letters, periodic schedules and nodes.
func browserScenario(t *testing.T, ctx context.Context, st store.Store) {
	var failing atomic.Bool
	failing.Store(true)
	f := newFixture(t, fixtureOptions{
		store: st,
		start: true,
		// No refresh: a content swap between finding a node and
		// reading or clicking it would fail the step (TestBrowserLive
		// tests the refresh).
		cfg: func(c *Config) { c.RefreshInterval = -1 },
		setup: func(s *ax.Scheduler) {
			require.NoError(t, ax.Handle(s, "email", func(_ context.Context, _ *ax.Job, p struct{ To string }) error {
				if failing.Load() {
					return fmt.Errorf("smtp: 421 service not available for %s", p.To)
				}
				return nil
			}, ax.MaxAttempts(1)))
			require.NoError(t, ax.Handle(s, "report", func(context.Context, *ax.Job, json.RawMessage) error { return nil }))
			require.NoError(t, s.Every("nightly-report", "0 3 * * *", map[string]string{"scope": "all"}, ax.JobKind("report")))
		},
	})
	shot := newShots(t)
	admin := f.s.Admin()
	bg := context.Background()
	for i := range 3 {
		_, err := f.s.Schedule(bg, "email", map[string]string{"To": fmt.Sprintf("user%d@example.com", i)}, ax.Metadata(map[string]string{"tenant": "acme"}))
		require.NoError(t, err)
	}
	for range 5 {
		_, err := f.s.Schedule(bg, "report", map[string]int{"n": 1})
		require.NoError(t, err)
	}
	count := func(kind string, st ax.State) int64 {
		n, err := admin.Count(bg, ax.JobFilter{Kinds: []string{kind}, States: []ax.State{st}})
		require.NoError(t, err)
		return n
	}
	waitFor(t, "three dead emails", func() bool { return count("email", ax.StateDead) == 3 })
	waitFor(t, "five reports done", func() bool { return count("report", ax.StateSucceeded) == 5 })
	failing.Store(false) // the mail server is back

	// Log in.
	run(t, ctx, "open the login form", chromedp.Navigate(f.base+"/"), chromedp.WaitVisible(chromedp.CSS("#login-form")))
	shot.take(ctx, "login")
	run(t, ctx, "log in",
		chromedp.SendKeys(chromedp.CSS("#key_id"), "app"),
		chromedp.SendKeys(chromedp.CSS("#secret"), string(testSecret)),
		click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#overview")))

	// The overview shows both kinds, with the dead emails counted.
	var dead string
	dead = get(t, ctx, chromedp.Text(chromedp.CSS("#kind-email .state-dead")))
	require.Equal(t, "3", strings.TrimSpace(dead))
	shot.take(ctx, "overview")

	// Filter the job list down to dead emails.
	run(t, ctx, "filter the job list",
		chromedp.Navigate(f.base+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS("#filters")),
		chromedp.SendKeys(chromedp.CSS("#f-kind"), "email"),
		chromedp.SetValue(chromedp.CSS("#f-state"), "dead"),
		click(chromedp.CSS("#apply-filters")),
		chromedp.WaitVisible(chromedp.CSS("#job-count")))
	// #job-count is on the unfiltered page too: wait for the filtered one
	// (a loaded machine may not have navigated yet).
	waitJS(t, ctx, `location.search.includes("state=dead")`)
	run(t, ctx, "wait for the filtered list", chromedp.WaitVisible(chromedp.CSS("#job-count")))
	var rows, deadRows int
	var url string
	url = get(t, ctx, chromedp.Location())
	rows = get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#job-list tr.job").length`))
	deadRows = get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#job-list tr.job.state-dead").length`))
	require.Contains(t, url, "state=dead")
	require.Equal(t, 3, rows)
	require.Equal(t, 3, deadRows)
	shot.take(ctx, "jobs-filtered-dead")

	// Open a dead job: its attempt's error is there.
	var state, attempts string
	run(t, ctx, "open a dead job",
		click(chromedp.CSS("#job-list tr.job a.job-link")),
		chromedp.WaitVisible(chromedp.CSS("#job-state")))
	state = get(t, ctx, chromedp.Text(chromedp.CSS("#job-state")))
	attempts = get(t, ctx, chromedp.Text(chromedp.CSS("#attempts")))
	require.Equal(t, "dead", state)
	require.Contains(t, attempts, "smtp: 421 service not available")
	shot.take(ctx, "job-dead")

	// Retry it and see it succeed.
	var flash string
	run(t, ctx, "retry the job",
		click(chromedp.CSS("#retry")),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	flash = get(t, ctx, chromedp.Text(chromedp.CSS("#flash")))
	require.Contains(t, flash, "Retried job")
	waitForText(t, ctx, "#job-state", "succeeded")
	shot.take(ctx, "job-succeeded")
	require.Equal(t, int64(2), count("email", ax.StateDead))

	// Pause reports; a new report waits; resume; it runs.
	run(t, ctx, "pause reports",
		chromedp.Navigate(f.base+"/kinds"),
		chromedp.WaitVisible(chromedp.CSS("#kinds")),
		click(chromedp.CSS(`button.pause[data-kind="report"]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
		chromedp.WaitVisible(chromedp.CSS(`#kind-report .badge.paused`)))
	shot.take(ctx, "kinds-report-paused")
	res, err := f.s.Schedule(bg, "report", map[string]int{"n": 2})
	require.NoError(t, err)
	// Several heartbeats and polls pass: the job is still waiting.
	time.Sleep(5 * 100 * time.Millisecond)
	rec, err := admin.Get(bg, res.ID)
	require.NoError(t, err)
	require.Equal(t, ax.StateScheduled, rec.State, "a job of a paused kind ran")
	run(t, ctx, "see the report wait",
		chromedp.Navigate(f.base+"/jobs?kind=report&state=scheduled"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#job-list tr[data-id="%s"]`, res.ID))))
	shot.take(ctx, "jobs-report-waiting")
	run(t, ctx, "resume reports",
		chromedp.Navigate(f.base+"/kinds"),
		chromedp.WaitVisible(chromedp.CSS("#kinds")),
		click(chromedp.CSS(`button.resume[data-kind="report"]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	waitFor(t, "the waiting report ran", func() bool {
		rec, err := admin.Get(bg, res.ID)
		return err == nil && rec.State == ax.StateSucceeded
	})
	run(t, ctx, "open the report", chromedp.Navigate(f.base+"/jobs/"+res.ID.String()), chromedp.WaitVisible(chromedp.CSS("#job-state")))
	waitForText(t, ctx, "#job-state", "succeeded")
	shot.take(ctx, "job-report-succeeded")

	// Dead letters: retry the rest in bulk.
	run(t, ctx, "open the dead letters", chromedp.Navigate(f.base+"/dead"), chromedp.WaitVisible(chromedp.CSS("#dead-list")))
	shot.take(ctx, "dead-letters")
	run(t, ctx, "retry the selected",
		click(chromedp.CSS("#select-all")),
		click(chromedp.CSS("#retry-selected")),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	flash = get(t, ctx, chromedp.Text(chromedp.CSS("#flash")))
	require.Contains(t, flash, "Retried 2 dead job(s).")
	waitFor(t, "every email delivered", func() bool { return count("email", ax.StateSucceeded) == 3 })

	// Periodic schedules and nodes.
	var next string
	run(t, ctx, "open the schedules",
		chromedp.Navigate(f.base+"/periodic"),
		chromedp.WaitVisible(chromedp.CSS("#schedule-nightly-report")))
	next = get(t, ctx, chromedp.Text(chromedp.CSS("#schedule-nightly-report")))
	require.Contains(t, next, "03:00:00Z")
	shot.take(ctx, "periodic")
	run(t, ctx, "open the nodes", chromedp.Navigate(f.base+"/nodes"), chromedp.WaitVisible(chromedp.CSS("#nodes")))
	shot.take(ctx, "nodes")
	run(t, ctx, "back to the overview", chromedp.Navigate(f.base+"/"), chromedp.WaitVisible(chromedp.CSS("#overview")))
	shot.take(ctx, "overview-after")

	// A read-only key's dashboard shows no buttons that act (a GET
	// form's, such as the kinds filter, only reads).
	run(t, ctx, "log out and in with the read-only key",
		click(chromedp.CSS("button.link")),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SendKeys(chromedp.CSS("#key_id"), "dash"),
		chromedp.SendKeys(chromedp.CSS("#secret"), string(readerSecret)),
		click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#read-only")),
		chromedp.Navigate(f.base+"/kinds"),
		chromedp.WaitVisible(chromedp.CSS("#kinds")))
	buttons := get(t, ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("main button")].filter(b => !(b.form && b.form.method === "get")).length`))
	require.Zero(t, buttons, "the read-only dashboard shows buttons")
	shot.take(ctx, "kinds-read-only")
}

// waitForText reloads the page until the element's text is want.
func waitForText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		run(t, ctx, "wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
		got := get(t, ctx, chromedp.Text(chromedp.CSS(sel)))
		if strings.TrimSpace(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, want %q", sel, got, want)
		}
		time.Sleep(100 * time.Millisecond)
		run(t, ctx, "reload", chromedp.Reload())
	}
}
