package axhttp

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// sessionOf returns the browser's session cookie.
func (b *browser) sessionOf() *http.Cookie {
	b.f.t.Helper()
	u, err := url.Parse(b.f.base + "/")
	require.NoError(b.f.t, err)
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			return c
		}
	}
	b.f.t.Fatal("no session cookie")
	return nil
}

// withCookie returns a new browser on f holding only the given session
// cookie value, as a thief who copied it would.
func (f *fixture) withCookie(value string) *browser {
	f.t.Helper()
	b := f.browser()
	u, err := url.Parse(f.base + "/")
	require.NoError(f.t, err)
	b.client.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: value, Path: "/ax/"}})
	return b
}

// hideRevocations hides a store's RevocationKeeper, as a store of the
// user's own that keeps none.
type hideRevocations struct{ store.Store }

// TestLogoutRevokesCopiedCookie: after a logout, a copy of the session
// cookie taken before it (with its CSRF token) neither reads nor changes
// anything, on the server that logged out and on another one on the same
// store with the same session key; a session that did not log out keeps
// working. Without revocations in the store, the logout holds on its own
// server. (Issue 25 defect 2: a copied cookie worked until its expiry.)
func TestLogoutRevokesCopiedCookie(t *testing.T) {
	sessionKey := []byte("session-key-0123456789abcdefghijklmnop")
	for _, c := range []struct {
		name          string
		memory        bool // each server keeps its revocations in memory
		replicaRefuse bool // the replica refuses the copy too
	}{
		{"revocations in the store", false, true},
		{"revocations in memory", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := func(cf *Config) {
				cf.SessionKey = sessionKey
				if c.memory {
					var shared bool
					cf.Revocations, shared = revocationsFor(hideRevocations{cf.Store}, time.Now)
					require.False(t, shared)
				}
			}
			f := newFixture(t, fixtureOptions{cfg: cfg})
			replica := newFixture(t, fixtureOptions{store: f.st, cfg: cfg})
			dead := deadJob(t, f.st, "email", "smtp down")
			retry := "/jobs/" + dead.String() + "/retry"

			b := f.browser()
			b.login("app", testSecret)
			token := b.csrf("/jobs/" + dead.String())
			stolen := b.sessionOf().Value
			other := f.browser()
			other.login("app", testSecret)

			thief := f.withCookie(stolen)
			res, _ := thief.get("/kinds")
			require.Equal(t, http.StatusOK, res.StatusCode, "the copy works before the logout")
			res, _ = replica.withCookie(stolen).get("/kinds")
			require.Equal(t, http.StatusOK, res.StatusCode, "the copy works on the replica before the logout")

			res, body := b.post("/logout", url.Values{"csrf": {token}})
			require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
			res, _ = b.get("/kinds")
			require.Equal(t, http.StatusSeeOther, res.StatusCode, "the browser that logged out")

			before := storeView(t, f)
			res, _ = thief.get("/kinds")
			require.Equal(t, http.StatusSeeOther, res.StatusCode, "the copy still reads after the logout")
			deleted := false
			for _, ck := range res.Cookies() {
				deleted = deleted || ck.Name == sessionCookie && ck.MaxAge < 0
			}
			require.True(t, deleted, "the revoked cookie is deleted")
			res, body = f.withCookie(stolen).post(retry, url.Values{"csrf": {token}})
			require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
			require.Equal(t, before, storeView(t, f), "the copy changed a job after the logout")
			res, _ = replica.withCookie(stolen).get("/kinds")
			want := map[bool]int{true: http.StatusSeeOther, false: http.StatusOK}[c.replicaRefuse]
			require.Equal(t, want, res.StatusCode, "the copy on the replica")

			res, _ = other.get("/kinds")
			require.Equal(t, http.StatusOK, res.StatusCode, "another session of the same key")
		})
	}
}

// TestSessionIdleAndLifetime: by default a session ends after 30 minutes
// without a request, even when it is younger than its lifetime, and
// after 8 hours however busy; a cookie copied at the login and not used
// since ends 30 minutes after it, while the session it was copied from
// goes on. (Issue 25 defect 2: sessions had no idle timeout and lasted
// 12 hours.)
func TestSessionIdleAndLifetime(t *testing.T) {
	var now atomic.Int64
	start := time.Now()
	now.Store(start.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	advance := func(d time.Duration) { now.Add(int64(d)) }
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.Clock = clock }})

	b := f.browser()
	b.login("app", testSecret)
	copied := f.withCookie(b.sessionOf().Value)
	for range 2 {
		advance(20 * time.Minute)
		res, _ := b.get("/kinds")
		require.Equal(t, http.StatusOK, res.StatusCode, "a session used every 20 minutes")
	}
	res, _ := copied.get("/kinds")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "a copy idle for 40 minutes")

	advance(31 * time.Minute)
	res, _ = b.get("/kinds")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "a session idle for 31 minutes")

	b.login("app", testSecret)
	login := clock()
	for clock().Sub(login) < DefaultSessionTTL-20*time.Minute {
		advance(20 * time.Minute)
		res, _ := b.get("/kinds")
		require.Equal(t, http.StatusOK, res.StatusCode, "a busy session after %s", clock().Sub(login))
	}
	advance(20 * time.Minute)
	res, _ = b.get("/kinds")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "a busy session after %s", clock().Sub(login))
}

// TestRevokeSessions: RevokeSessions ends every session of one key that
// was opened before it, on every server on the store, and no other key's;
// a login after it works. New refuses a SessionTTL over MaxSessionTTL.
func TestRevokeSessions(t *testing.T) {
	sessionKey := []byte("session-key-0123456789abcdefghijklmnop")
	cfg := func(c *Config) { c.SessionKey = sessionKey }
	f := newFixture(t, fixtureOptions{cfg: cfg})
	replica := newFixture(t, fixtureOptions{store: f.st, cfg: cfg})
	a1, a2, reader := f.browser(), replica.browser(), f.browser()
	a1.login("app", testSecret)
	a2.login("app", testSecret)
	reader.login("dash", readerSecret)

	require.NoError(t, f.h.RevokeSessions(t.Context(), "app"))
	for _, c := range []struct {
		name   string
		b      *browser
		status int
	}{
		{"the key's session on this server", a1, http.StatusSeeOther},
		{"the key's session on the replica", a2, http.StatusSeeOther},
		{"another key's session", reader, http.StatusOK},
	} {
		res, _ := c.b.get("/kinds")
		require.Equal(t, c.status, res.StatusCode, c.name)
	}
	a1.login("app", testSecret)
	res, _ := a1.get("/kinds")
	require.Equal(t, http.StatusOK, res.StatusCode, "a login after the revocation")

	require.ErrorIs(t, RevokeSessions(t.Context(), f.st.(store.RevocationKeeper), "", time.Now()), store.ErrInvalidParams)
	_, err := New(Config{Store: f.st, SessionTTL: MaxSessionTTL + time.Hour})
	require.ErrorIs(t, err, ErrInvalidConfig)
}
