package axhttp

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestDashboardPages: after a login every page renders, escaping what
// users control (a kind with markup is shown as text).
func TestDashboardPages(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	res, err := f.s.Schedule(ctx, "<script>alert(1)</script>", map[string]string{"x": "</pre><b>y</b>"}, ax.Metadata(map[string]string{"tenant": "<i>7</i>"}))
	require.NoError(t, err)
	b := f.browser()
	r, _ := b.get("/")
	require.Equal(t, http.StatusSeeOther, r.StatusCode, "no session: to the login form")
	require.Equal(t, "/ax/login", r.Header.Get("Location"))
	b.login("app", testSecret)
	for _, p := range []string{"/", "/jobs", "/jobs?state=scheduled&kind=x", "/jobs/" + res.ID.String(), "/dead", "/kinds", "/periodic", "/nodes"} {
		r, body := b.get(p)
		require.Equal(t, http.StatusOK, r.StatusCode, "%s: %s", p, body)
		require.Contains(t, r.Header.Get("Content-Security-Policy"), "default-src 'self'")
		require.NotContains(t, body, "<script>alert", p)
		require.NotContains(t, body, "<b>y</b>", p)
		require.NotContains(t, body, "<i>7</i>", p)
	}
	r, body := b.get("/jobs/" + res.ID.String())
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	r, _ = b.get("/nope")
	require.Equal(t, http.StatusNotFound, r.StatusCode)
	r, _ = b.get("/static/style.css")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Equal(t, "text/css; charset=utf-8", r.Header.Get("Content-Type"))

	// Log out: the session is gone.
	tok := b.csrf("/")
	r, _ = b.post("/logout", url.Values{"csrf": {tok}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode)
	r, _ = b.get("/jobs")
	require.Equal(t, http.StatusSeeOther, r.StatusCode)
	require.True(t, strings.HasSuffix(r.Header.Get("Location"), "/login"))
}

// TestDashboardOddNames: kinds and schedule names with slashes, spaces and
// markup are paused from the dashboard's forms intact.
func TestDashboardOddNames(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	const kind = "team/a b+c<i>"
	_, err := f.s.Schedule(context.Background(), kind, 1)
	require.NoError(t, err)
	b := f.browser()
	b.login("app", testSecret)
	_, page := b.get("/kinds")
	require.NotContains(t, page, "<i>")
	m := regexp.MustCompile(`action="(/ax/kinds/[^"]+/pause)"`).FindStringSubmatch(page)
	require.NotNil(t, m, page)
	action := html.UnescapeString(m[1])
	res, body := b.post(strings.TrimPrefix(action, "/ax"), url.Values{"csrf": {b.csrf("/kinds")}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	kinds, err := f.s.Admin().Kinds(context.Background())
	require.NoError(t, err)
	require.Len(t, kinds, 1)
	require.Equal(t, kind, kinds[0].Kind)
	require.True(t, kinds[0].Paused)
}

// TestSessionEnds: a session ends after SessionTTL, and when its key is
// removed or its secret changes.
func TestSessionEnds(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) {
		c.Clock, c.SessionTTL, c.SessionIdleTimeout = clock, time.Hour, -1 // the idle timeout: TestSessionIdle
	}})
	b := f.browser()
	b.login("app", testSecret)
	r, _ := b.get("/kinds")
	require.Equal(t, http.StatusOK, r.StatusCode)
	now.Add(int64(59 * time.Minute))
	r, _ = b.get("/kinds")
	require.Equal(t, http.StatusOK, r.StatusCode)
	now.Add(int64(2 * time.Minute))
	r, _ = b.get("/kinds")
	require.Equal(t, http.StatusSeeOther, r.StatusCode, "an expired session still works")

	// Servers sharing a session key: a session opened on one works on
	// another whose key has the same secret, not on one whose key's
	// secret changed, nor one without the key.
	sessionKey := []byte("session-key-0123456789abcdefghijklmnop")
	server := func(keys ...Key) *fixture {
		return newFixture(t, fixtureOptions{cfg: func(c *Config) {
			c.SessionKey = sessionKey
			auth, err := NewAuth(AuthConfig{Keys: keys, Nonces: NewMemoryNonces(0)})
			require.NoError(t, err)
			c.Auth = auth
		}})
	}
	first := server(Key{ID: "app", Secret: testSecret})
	fb := first.browser()
	fb.login("app", testSecret)
	u, _ := url.Parse(first.base + "/")
	var session *http.Cookie
	for _, c := range fb.client.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			session = c
		}
	}
	require.NotNil(t, session)
	for _, c := range []struct {
		name   string
		keys   []Key
		status int
	}{
		{"same secret", []Key{{ID: "app", Secret: testSecret}}, http.StatusOK},
		{"secret changed", []Key{{ID: "app", Secret: otherSecret}}, http.StatusSeeOther},
		{"key removed", []Key{{ID: "app-next", Secret: testSecret}}, http.StatusSeeOther},
	} {
		g := server(c.keys...)
		gb := g.browser()
		gu, _ := url.Parse(g.base + "/")
		gb.client.Jar.SetCookies(gu, []*http.Cookie{{Name: sessionCookie, Value: session.Value, Path: "/ax/"}})
		r, _ := gb.get("/kinds")
		require.Equal(t, c.status, r.StatusCode, c.name)
	}
}
