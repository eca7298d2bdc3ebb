package axhttp

import (
	"context"
	"fmt"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/google/uuid"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// acceptDialogs makes the page's confirm() say yes (the buttons with
// data-confirm ask first); a navigation undoes it.
func acceptDialogs() chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`window.confirm = function () { return true; }`)
}

// TestBrowserOperatorPages: in Chromium, the dead letters grouped by
// error (callback deliveries apart) and a group retried with its button;
// the Kinds page's breaker opened and closed with its buttons.
func TestBrowserOperatorPages(t *testing.T) {
	ctx := newBrowser(t)
	var shift atomic.Int64 // the store's clock is this far behind
	st := memstore.New(memstore.WithClock(func() time.Time { return time.Now().Add(-time.Duration(shift.Load())) }))
	fillHour(t, st, &shift)
	f := newFixture(t, fixtureOptions{store: st, start: true, setup: withBreaker(t),
		cfg: func(c *Config) { c.RefreshInterval = -1 }}) // no refresh between finding a button and clicking it
	waitForFlow(t, f)
	for range 41 {
		deadJob(t, f.st, "mailer", "smtp: 550 5.2.2 mailbox full")
	}
	for range 7 {
		deadJob(t, f.st, "mailer", "smtp: 421 4.7.0 try again later\n\tat smtp.go:88")
	}
	for range 3 {
		deadJob(t, f.st, "invoice", fmt.Sprintf("pdf: template %q not found", "q4"))
	}
	for range 2 {
		deadCallback(t, f.st)
	}
	bg := context.Background()
	for range 5 {
		_, err := f.s.Schedule(bg, "invoice", map[string]int{"n": 1}, ax.In(time.Hour))
		require.NoError(t, err)
	}
	shot := newShots(t)

	run(t, ctx, "log in",
		chromedp.Navigate(f.base+"/login"),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SendKeys(chromedp.CSS("#key_id"), "app"),
		chromedp.SendKeys(chromedp.CSS("#secret"), string(testSecret)),
		click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#overview")))
	shot.take(ctx, "overview")

	run(t, ctx, "open the dead letters", chromedp.Navigate(f.base+"/dead"), chromedp.WaitVisible(chromedp.CSS("#dead-groups")))
	first := get(t, ctx, chromedp.Text(chromedp.CSS("#dead-groups tbody tr")))
	require.Contains(t, first, "×")
	require.Contains(t, first, "smtp: 550 5.2.2 mailbox full")
	calls := get(t, ctx, chromedp.Text(chromedp.CSS("#dead-callbacks")))
	require.Contains(t, calls, CallbackKind)
	groups := get(t, ctx, chromedp.Text(chromedp.CSS("#dead-groups")))
	require.NotContains(t, groups, CallbackKind, "callback deliveries are apart")
	shot.take(ctx, "dead-grouped")
	// The groups as an operator first sees them (the screen
	// docs/screenshots/dead-grouped.png shows).
	top := get(t, ctx, chromedp.CaptureScreenshot())
	require.NoError(t, os.WriteFile(filepath.Join(shot.dir, "dead-grouped-top.png"), top, 0o644))

	run(t, ctx, "retry the 421 group",
		acceptDialogs(),
		click(chromedp.CSS(`tr[data-group="`+groupKey("mailer", "smtp: 421 4.7.0 try again later")+`"] button.group-retry`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	flash := get(t, ctx, chromedp.Text(chromedp.CSS("#flash")))
	require.Contains(t, flash, "Retried 7 dead job(s) of mailer: smtp: 421 4.7.0 try again later")
	groups = get(t, ctx, chromedp.Text(chromedp.CSS("#dead-groups")))
	require.NotContains(t, groups, "421")
	require.Contains(t, groups, "smtp: 550 5.2.2 mailbox full")

	run(t, ctx, "open the breaker",
		chromedp.Navigate(f.base+"/kinds"),
		chromedp.WaitVisible(chromedp.CSS("#kind-smtp")),
		acceptDialogs(),
		click(chromedp.CSS(`#kind-smtp button.breaker-button`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	breaker := get(t, ctx, chromedp.Text(chromedp.CSS("#kind-smtp .breaker")))
	require.Contains(t, breaker, "open until")
	require.Contains(t, breaker, "Close breaker")
	row := get(t, ctx, chromedp.Text(chromedp.CSS("#kind-smtp")))
	require.Contains(t, row, "5 running, 100/1s")
	shot.take(ctx, "kinds-breaker-open")
	run(t, ctx, "close the breaker",
		click(chromedp.CSS(`#kind-smtp button.breaker-button`)))
	// The opening's flash is still shown until the page the closing
	// redirects to replaces it: wait for the closing's own.
	waitJS(t, ctx, `((document.querySelector("#flash") || {}).textContent || "").includes("Closed the breaker")`)
	breaker = get(t, ctx, chromedp.Text(chromedp.CSS("#kind-smtp .breaker")))
	require.True(t, strings.HasPrefix(strings.TrimSpace(breaker), "closed"), breaker)
}

// fillHour gives st an hour of finished jobs, as the overview's charts
// show them: every minute a few dozen mailer and invoice jobs that
// waited a little (more in a backlog at minutes 20 to 30) and succeeded,
// and a burst of mailer deaths at minutes 40 to 45. It moves st's clock
// (shift) through the hour and back to now.
func fillHour(t *testing.T, st store.Store, shift *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	defer shift.Store(0)
	for m := range 60 {
		for _, kind := range []string{"mailer", "invoice"} {
			n := 12 + (m*7)%9
			if kind == "invoice" {
				n = 4 + m%5
			}
			lag := time.Duration(100+(m*37)%400) * time.Millisecond
			if m >= 20 && m < 30 {
				lag = time.Duration(m-18) * 3 * time.Second
			}
			for i := range n {
				due := time.Duration(60-m)*time.Minute - time.Duration(i)*time.Second
				shift.Store(int64(due))
				id := uuid.Must(uuid.NewV7())
				_, err := st.Insert(ctx, []store.InsertParams{{ID: id, Kind: kind, Payload: []byte(`{}`), Priority: 2, MaxAttempts: 1}})
				require.NoError(t, err)
				shift.Store(int64(due - lag))
				res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
				require.NoError(t, err)
				require.Len(t, res.Jobs, 1)
				outcome, msg := store.OutcomeSucceeded, ""
				if kind == "mailer" && m >= 40 && m < 46 && i%2 == 0 {
					outcome, msg = store.OutcomeDead, "smtp: 550 5.2.2 mailbox full"
				}
				shift.Store(int64(due - lag - 200*time.Millisecond))
				_, err = st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: res.Jobs[0].ID, Token: res.Jobs[0].LeaseToken}, Outcome: outcome, Error: msg}})
				require.NoError(t, err)
			}
		}
	}
}
