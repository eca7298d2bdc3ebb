package axhttp

import (
	"context"
	"net/http"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// browserCookie reads a cookie of the browser for url (HttpOnly ones
// included, through the DevTools protocol).
func browserCookie(t *testing.T, ctx context.Context, url, name string) string {
	t.Helper()
	cookies := get(t, ctx, chromedp.Action[[]*network.Cookie](func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{url}})
		return res.Cookies, err
	}))
	for _, c := range cookies {
		if c.Name == name {
			return c.Value
		}
	}
	t.Fatalf("the browser holds no cookie %s for %s", name, url)
	return ""
}

// TestBrowserLogoutEndsCopiedSession: an operator logs in with Chromium;
// a copy of the session cookie works; once the operator clicks "Log out",
// the copy is sent to the login form, and Chromium too. (Issue 25 defect
// 2.)
func TestBrowserLogoutEndsCopiedSession(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t, fixtureOptions{})
	shot := newShots(t)
	run(t, ctx, "log in",
		chromedp.Navigate(f.base+"/login"),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SendKeys(chromedp.CSS("#key_id"), "app"),
		chromedp.SendKeys(chromedp.CSS("#secret"), string(testSecret)),
		click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#overview")),
	)
	stolen := browserCookie(t, ctx, f.base+"/", sessionCookie)
	res, _ := f.withCookie(stolen).get("/kinds")
	require.Equal(t, http.StatusOK, res.StatusCode, "the copy before the logout")

	run(t, ctx, "log out",
		click(chromedp.CSS("button.link")),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
	)
	shot.take(ctx, "logged-out")
	res, _ = f.withCookie(stolen).get("/kinds")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the copy after the logout")
	run(t, ctx, "open a page after the logout",
		chromedp.Navigate(f.base+"/kinds"),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
	)
}
