package axhttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// deadJob inserts a job of kind and lets it die, as a handler's last
// failed attempt would.
func deadJob(t *testing.T, st store.Store, kind, msg string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	_, err := st.Insert(ctx, []store.InsertParams{{ID: id, Kind: kind, Payload: []byte(`{"n":1}`), Priority: 2, MaxAttempts: 1}})
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	_, err = st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: id, Token: res.Jobs[0].LeaseToken}, Outcome: store.OutcomeDead, Error: msg}})
	require.NoError(t, err)
	return id
}

var secrets = [][]byte{testSecret, otherSecret, readerSecret}

// requireNoSecret fails when body holds a key's secret or a signature.
func requireNoSecret(t *testing.T, body string, sigs ...string) {
	t.Helper()
	for _, s := range secrets {
		require.NotContains(t, body, string(s))
	}
	for _, s := range sigs {
		if s != "" {
			require.NotContains(t, body, s)
		}
	}
}

// TestAPISecurity: each hostile request to the API is refused with its
// status and problem type; every job and kind is as it was (storeView);
// the answer tells no secret. The rows are the attacks of issue 25
// (signatures, replay, read-only keys, cross-site requests, callbacks to
// internal addresses, oversized and malformed bodies, invalid UTF-8, deep
// nesting, path traversal in a kind); TestStoredXSSInert has the stored
// XSS ones, which are taken and must render inert.
func TestAPISecurity(t *testing.T) {
	now := time.Now()
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) {
		c.MaxBodyBytes = 1 << 10
		c.CallbackPolicy = &CallbackPolicy{} // the default: no private addresses
	}})
	dead := deadJob(t, f.st, "email", "smtp down")
	retry := APIPrefix + "/jobs/" + dead.String() + "/retry"
	replayed := func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, f.base+retry, nil)
		require.NoError(t, err)
		require.NoError(t, f.app.Sign(req))
		return req
	}()
	// The original is sent (and retries the job) before the table; the
	// table sends it again.
	first := replayed.Clone(context.Background())
	res, err := http.DefaultClient.Do(first)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	dead = deadJob(t, f.st, "email", "smtp down")
	retry = APIPrefix + "/jobs/" + dead.String() + "/retry"

	sign := func(s Signer, method, path, body string, edit func(*http.Request)) *http.Request {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, f.base+path, rd)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		require.NoError(t, s.Sign(req))
		if edit != nil {
			edit(req)
		}
		return req
	}
	cases := []struct {
		name   string
		req    func() *http.Request
		status int
		typ    string
	}{
		{"wrong signature", func() *http.Request {
			return sign(f.app, "POST", retry, "", func(r *http.Request) {
				r.Header.Set(HeaderSignature, strings.Repeat("ab", 32))
			})
		}, 401, ProblemUnauthorized},
		{"signed with another key's secret", func() *http.Request {
			return sign(Signer{KeyID: "app", Secret: readerSecret}, "POST", retry, "", nil)
		}, 401, ProblemUnauthorized},
		{"expired timestamp", func() *http.Request {
			return sign(Signer{KeyID: "app", Secret: testSecret, Clock: func() time.Time { return now.Add(-6 * time.Minute) }}, "POST", retry, "", nil)
		}, 401, ProblemUnauthorized},
		{"timestamp from the future", func() *http.Request {
			return sign(Signer{KeyID: "app", Secret: testSecret, Clock: func() time.Time { return now.Add(6 * time.Minute) }}, "POST", retry, "", nil)
		}, 401, ProblemUnauthorized},
		{"reused nonce", func() *http.Request { return replayed }, 401, ProblemUnauthorized},
		{"unknown key", func() *http.Request {
			return sign(Signer{KeyID: "ghost", Secret: testSecret}, "POST", retry, "", nil)
		}, 401, ProblemUnauthorized},
		{"no signature", func() *http.Request {
			req, _ := http.NewRequest("POST", f.base+retry, nil)
			return req
		}, 401, ProblemUnauthorized},
		{"read-only key retrying", func() *http.Request { return sign(f.reader, "POST", retry, "", nil) }, 403, ProblemForbidden},
		{"read-only key pausing", func() *http.Request {
			return sign(f.reader, "POST", APIPrefix+"/kinds/email/pause", "", nil)
		}, 403, ProblemForbidden},
		{"read-only key submitting", func() *http.Request {
			return sign(f.reader, "POST", APIPrefix+"/jobs", `{"kind":"email"}`, nil)
		}, 403, ProblemForbidden},
		{"oversized body", func() *http.Request {
			return sign(f.app, "POST", APIPrefix+"/jobs", `{"kind":"email","payload":"`+strings.Repeat("x", 2<<10)+`"}`, nil)
		}, 413, ProblemTooLarge},
		{"malformed JSON", func() *http.Request {
			return sign(f.app, "POST", APIPrefix+"/jobs", `{"kind":"email",`, nil)
		}, 400, ProblemBadRequest},
		{"JSON of the wrong shape", func() *http.Request {
			return sign(f.app, "POST", APIPrefix+"/jobs", `{"kind":["email"]}`, nil)
		}, 400, ProblemBadRequest},
		{"two JSON values", func() *http.Request {
			return sign(f.app, "POST", APIPrefix+"/jobs", `{"kind":"email"}{"kind":"email"}`, nil)
		}, 400, ProblemBadRequest},
		{"not JSON", func() *http.Request {
			return sign(f.app, "POST", APIPrefix+"/jobs", `kind=email`, func(r *http.Request) {})
		}, 400, ProblemBadRequest},
		{"form content type", func() *http.Request {
			req := sign(f.app, "POST", APIPrefix+"/jobs", `{"kind":"email"}`, nil)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return req
		}, 415, ProblemUnsupportedType},
		{"cross-site browser POST", func() *http.Request {
			return sign(f.app, "POST", retry, "", func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") })
		}, 403, ProblemForbidden},
		{"callback with another scheme", func() *http.Request {
			return sign(f.app, "POST", APIPrefix+"/jobs", `{"kind":"email","callback_url":"ftp://127.0.0.1/"}`, nil)
		}, 400, ProblemBadRequest},
	}
	// Submissions refused whatever their signature: each is sent signed
	// by the read-write key.
	for _, c := range []struct {
		name, path, body string
		status           int
		typ              string
	}{
		{"callback to loopback", "/jobs", `{"kind":"email","callback_url":"http://127.0.0.1:5432/"}`, 400, ProblemBadRequest},
		{"callback to IPv6 loopback", "/jobs", `{"kind":"email","callback_url":"http://[::1]/"}`, 400, ProblemBadRequest},
		{"callback to cloud metadata", "/jobs", `{"kind":"email","callback_url":"http://169.254.169.254/latest/meta-data/"}`, 400, ProblemBadRequest},
		{"callback to a private network", "/jobs", `{"kind":"email","callback_url":"https://10.0.0.7/hook"}`, 400, ProblemBadRequest},
		{"callback to IPv4-mapped loopback", "/jobs", `{"kind":"email","callback_url":"http://[::ffff:127.0.0.1]/"}`, 400, ProblemBadRequest},
		{"callback with user info", "/jobs", `{"kind":"email","callback_url":"https://user:pw@example.com/"}`, 400, ProblemBadRequest},
		{"callback in a batch", "/jobs/batch", `{"jobs":[{"kind":"email"},{"kind":"email","callback_url":"http://127.0.0.1/"}]}`, 400, ProblemBadRequest},
		{"invalid UTF-8 in kind", "/jobs", "{\"kind\":\"email\xff\"}", 400, ProblemBadRequest},
		{"invalid UTF-8 in a metadata key", "/jobs", "{\"kind\":\"email\",\"metadata\":{\"\xc0\xaf\":\"v\"}}", 400, ProblemBadRequest},
		{"lone surrogate in a metadata value", "/jobs", `{"kind":"email","metadata":{"k":"\udc00"}}`, 400, ProblemBadRequest},
		{"invalid UTF-8 in the payload", "/jobs", "{\"kind\":\"email\",\"payload\":\"\xff\"}", 400, ProblemBadRequest},
		{"NUL in kind", "/jobs", `{"kind":"email\u0000"}`, 400, ProblemBadRequest},
		{"payload nested 65 deep", "/jobs", `{"kind":"email","payload":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`, 400, ProblemBadRequest},
		{"payload nested 65 deep in a batch", "/jobs/batch", `{"jobs":[{"kind":"email","payload":` + strings.Repeat("{\"a\":", 65) + "1" + strings.Repeat("}", 65) + `}]}`, 400, ProblemBadRequest},
		{"unterminated nesting", "/jobs", strings.Repeat("[", 1000), 400, ProblemBadRequest},
		{"nesting over the body limit", "/jobs", strings.Repeat("[", 2000), 413, ProblemTooLarge},
		{"empty kind", "/jobs", `{"kind":""}`, 400, ProblemBadRequest},
		{"kind over 255 bytes", "/jobs", `{"kind":"` + strings.Repeat("k", 256) + `"}`, 400, ProblemBadRequest},
		{"no jobs in a batch", "/jobs/batch", `{"jobs":[]}`, 400, ProblemBadRequest},
		{"retry of every job without all=true", "/jobs/retry", ``, 400, ProblemBadRequest},
		{"cancel of every job without all=true", "/jobs/cancel", ``, 400, ProblemBadRequest},
		{"pause of a kind nobody runs", "/kinds/ghost/pause", ``, 404, ProblemNotFound},
		{"path traversal in a kind", "/kinds/..%2F..%2Fjobs/pause", ``, 404, ProblemNotFound},
		{"pause with force=maybe", "/kinds/email/pause?force=maybe", ``, 400, ProblemBadRequest},
		{"invalid UTF-8 in a kind's path", "/kinds/%FF/pause", ``, 400, ProblemBadRequest},
		{"NUL in a kind's path", "/kinds/a%00b/pause?force=true", ``, 400, ProblemBadRequest},
		{"unknown job", "/jobs/" + uuid.NewString() + "/retry", ``, 404, ProblemNotFound},
		{"malformed job ID", "/jobs/..%2F..%2Fkinds/retry", ``, 404, ProblemNotFound},
		{"unknown schedule", "/periodic/..%2Fnightly/trigger", ``, 404, ProblemNotFound},
	} {
		cases = append(cases, struct {
			name   string
			req    func() *http.Request
			status int
			typ    string
		}{c.name, func() *http.Request { return sign(f.app, "POST", APIPrefix+c.path, c.body, nil) }, c.status, c.typ})
	}
	cases = append(cases, struct {
		name   string
		req    func() *http.Request
		status int
		typ    string
	}{"read-only key forcing a pause", func() *http.Request {
		return sign(f.reader, "POST", APIPrefix+"/kinds/ghost/pause?force=true", "", nil)
	}, 403, ProblemForbidden})
	before := storeView(t, f)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req()
			sig := req.Header.Get(HeaderSignature)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			require.Equal(t, c.status, res.StatusCode, "%s", b)
			require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
			require.Contains(t, string(b), `"type":"`+c.typ+`"`)
			requireNoSecret(t, string(b), sig)
			require.Equal(t, before, storeView(t, f), "the store changed")
		})
	}
}

// TestDashboardSecurity: changes without a session, without or with a
// wrong CSRF token, from a read-only key or from another site are
// refused with 401 or 403 and change nothing; logins with a wrong secret
// or an unknown key get one answer.
func TestDashboardSecurity(t *testing.T) {
	f := newFixture(t, fixtureOptions{start: true, setup: withBreaker(t), cfg: func(c *Config) { c.MaxBodyBytes = 1 << 10 }})
	dead := deadJob(t, f.st, "email", "smtp down")
	retry := "/jobs/" + dead.String() + "/retry"
	waitForFlow(t, f)
	group := groupKey("email", "smtp down")

	admin := f.browser()
	admin.login("app", testSecret)
	token := admin.csrf("/jobs/" + dead.String())
	other := f.browser()
	other.login("app", testSecret)
	otherToken := other.csrf("/")
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) // a dead group form's view (upto)
	require.NotEqual(t, token, otherToken, "two sessions share a CSRF token")
	reader := f.browser()
	reader.login("dash", readerSecret)
	readerToken := reader.csrf("/")
	_, page := reader.get("/jobs/" + dead.String())
	require.NotContains(t, page, `id="retry"`, "the read-only dashboard shows a retry button")
	require.Contains(t, page, `id="read-only"`)
	anon := f.browser()

	post := func(b *browser, path string, form url.Values, hdr ...string) (*http.Response, string) {
		req, err := http.NewRequest("POST", f.base+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := b.client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res, string(body)
	}
	cases := []struct {
		name   string
		b      *browser
		path   string
		form   url.Values
		hdr    []string
		status int
	}{
		{"missing CSRF token", admin, retry, url.Values{}, nil, 403},
		{"empty CSRF token", admin, retry, url.Values{"csrf": {""}}, nil, 403},
		{"wrong CSRF token", admin, retry, url.Values{"csrf": {"AAAA" + token[4:]}}, nil, 403},
		{"another session's CSRF token", admin, retry, url.Values{"csrf": {otherToken}}, nil, 403},
		{"missing CSRF token, pausing", admin, "/kinds/email/pause", url.Values{}, nil, 403},
		{"wrong CSRF token, bulk retry", admin, "/dead/retry", url.Values{"csrf": {otherToken}, "all": {"true"}}, nil, 403},
		{"read-only key retrying", reader, retry, url.Values{"csrf": {readerToken}}, nil, 403},
		{"read-only key pausing", reader, "/kinds/email/pause", url.Values{"csrf": {readerToken}}, nil, 403},
		{"read-only key retrying every dead job", reader, "/dead/retry", url.Values{"csrf": {readerToken}, "all": {"true"}}, nil, 403},
		{"no session", anon, retry, url.Values{"csrf": {token}}, nil, 401},
		{"cross-site POST with a good token", admin, retry, url.Values{"csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"cross-origin POST with a good token", admin, retry, url.Values{"csrf": {token}}, []string{"Origin", "https://evil.example"}, 403},
		{"oversized form", admin, retry, url.Values{"csrf": {token}, "pad": {strings.Repeat("x", 2<<10)}}, nil, 413},
		{"pause of a kind nobody runs", admin, "/kinds/ghost/pause", url.Values{"csrf": {token}}, nil, 404},
		{"path traversal in a kind", admin, "/kinds/..%2F..%2Fjobs/pause", url.Values{"csrf": {token}}, nil, 404},
		{"invalid UTF-8 in a kind", admin, "/kinds/%FF/pause", url.Values{"csrf": {token}}, nil, 400},
		{"malformed ID in a bulk retry", admin, "/dead/retry", url.Values{"csrf": {token}, "id": {"../x"}}, nil, 400},
		{"invalid UTF-8 kind in a bulk retry", admin, "/dead/retry", url.Values{"csrf": {token}, "all": {"true"}, "kind": {"\xff"}}, nil, 400},
		{"malformed job ID", admin, "/jobs/..%2Fkinds/retry", url.Values{"csrf": {token}}, nil, 404},
		{"unknown job", admin, "/jobs/" + uuid.NewString() + "/cancel", url.Values{"csrf": {token}}, nil, 404},
		{"missing CSRF token, retrying a dead group", admin, "/dead/group/retry", url.Values{"kind": {"email"}, "group": {group}}, nil, 403},
		{"another session's CSRF token, discarding a dead group", admin, "/dead/group/discard", url.Values{"csrf": {otherToken}, "kind": {"email"}, "group": {group}}, nil, 403},
		{"read-only key retrying a dead group", reader, "/dead/group/retry", url.Values{"csrf": {readerToken}, "kind": {"email"}, "group": {group}}, nil, 403},
		{"read-only key discarding a dead group", reader, "/dead/group/discard", url.Values{"csrf": {readerToken}, "kind": {"email"}, "group": {group}}, nil, 403},
		{"cross-site discard of a dead group", admin, "/dead/group/discard", url.Values{"csrf": {token}, "kind": {"email"}, "group": {group}}, []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"dead group of another kind", admin, "/dead/group/discard", url.Values{"csrf": {token}, "kind": {"smtp"}, "group": {group}, "upto": {later}, "count": {"1"}}, nil, 404},
		{"dead group without the page's view", admin, "/dead/group/discard", url.Values{"csrf": {token}, "kind": {"email"}, "group": {group}}, nil, 400},
		{"dead group with a bad count", admin, "/dead/group/discard", url.Values{"csrf": {token}, "kind": {"email"}, "group": {group}, "upto": {later}, "count": {"0"}}, nil, 400},
		{"dead group without a kind", admin, "/dead/group/discard", url.Values{"csrf": {token}, "group": {group}}, nil, 400},
		{"malformed dead group", admin, "/dead/group/discard", url.Values{"csrf": {token}, "kind": {"email"}, "group": {"' OR 1=1"}}, nil, 400},
		{"unknown dead group", admin, "/dead/group/retry", url.Values{"csrf": {token}, "kind": {"email"}, "group": {groupKey("email", "other")}, "upto": {later}, "count": {"1"}}, nil, 404},
		{"invalid UTF-8 kind of a dead group", admin, "/dead/group/retry", url.Values{"csrf": {token}, "kind": {"\xff"}, "group": {group}}, nil, 400},
		{"missing CSRF token, opening a breaker", admin, "/kinds/smtp/breaker/open", url.Values{}, nil, 403},
		{"another session's CSRF token, opening a breaker", admin, "/kinds/smtp/breaker/open", url.Values{"csrf": {otherToken}}, nil, 403},
		{"read-only key opening a breaker", reader, "/kinds/smtp/breaker/open", url.Values{"csrf": {readerToken}}, nil, 403},
		{"cross-site breaker opening", admin, "/kinds/smtp/breaker/open", url.Values{"csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"breaker of a kind without one", admin, "/kinds/email/breaker/open", url.Values{"csrf": {token}}, nil, 404},
		{"breaker of an unknown kind", admin, "/kinds/ghost/breaker/close", url.Values{"csrf": {token}}, nil, 404},
		{"invalid UTF-8 in a breaker's kind", admin, "/kinds/%FF/breaker/open", url.Values{"csrf": {token}}, nil, 400},
	}
	before := storeView(t, f)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := post(c.b, c.path, c.form, c.hdr...)
			require.Equal(t, c.status, res.StatusCode, body)
			requireNoSecret(t, body)
			require.Equal(t, before, storeView(t, f), "the store changed")
		})
	}

	// Logins: a wrong secret and an unknown key get the same answer.
	for _, c := range []struct{ name, key, secret string }{
		{"wrong secret", "app", string(otherSecret)},
		{"unknown key", "ghost", string(testSecret)},
		{"empty secret", "app", ""},
	} {
		t.Run("login with "+c.name, func(t *testing.T) {
			b := f.browser()
			tok := b.csrf("/login")
			res, body := b.post("/login", url.Values{"csrf": {tok}, "key_id": {c.key}, "secret": {c.secret}})
			require.Equal(t, http.StatusUnauthorized, res.StatusCode)
			require.Contains(t, body, "Unknown key or wrong secret.")
			requireNoSecret(t, body)
			r, _ := b.get("/")
			require.Equal(t, http.StatusSeeOther, r.StatusCode, "a refused login opened a session")
		})
	}
	t.Run("login without CSRF token", func(t *testing.T) {
		b := f.browser()
		res, _ := b.post("/login", url.Values{"key_id": {"app"}, "secret": {string(testSecret)}})
		require.Equal(t, http.StatusForbidden, res.StatusCode)
	})
	t.Run("forged session cookie", func(t *testing.T) {
		b := f.browser()
		u, _ := url.Parse(f.base + "/")
		b.client.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: "eyJrIjoiYXBwIiwiZSI6OTk5OTk5OTk5OSwibiI6IngiLCJmIjoieCJ9.AAAA", Path: "/ax/"}})
		r, _ := b.get("/jobs")
		require.Equal(t, http.StatusSeeOther, r.StatusCode)
	})
	t.Run("session cookie attributes", func(t *testing.T) {
		b := f.browser()
		tok := b.csrf("/login")
		res, _ := b.post("/login", url.Values{"csrf": {tok}, "key_id": {"app"}, "secret": {string(testSecret)}})
		var c *http.Cookie
		for _, x := range res.Cookies() {
			if x.Name == sessionCookie {
				c = x
			}
		}
		require.NotNil(t, c)
		require.True(t, c.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, c.SameSite)
		require.Equal(t, "/ax/", c.Path)
		require.False(t, c.Secure, "plain HTTP test server")
		requireNoSecret(t, c.Value)
	})

	// And the same change with everything right goes through.
	res, body := post(admin, retry, url.Values{"csrf": {token}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	rec, err := f.s.Admin().Get(context.Background(), dead)
	require.NoError(t, err)
	require.Equal(t, ax.StateScheduled, rec.State)
}

// rawGet sends path exactly as written (no client-side cleaning) and
// returns the status and body.
func rawGet(t *testing.T, hostport, path string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", hostport)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, hostport)
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestStaticPathTraversal: no path below the static route reaches a file
// outside the embedded assets, however encoded, and no redirect leads to
// one.
func TestStaticPathTraversal(t *testing.T) {
	f := newFixture(t, fixtureOptions{noAuth: true})
	host := strings.TrimPrefix(f.srv.URL, "http://")
	status, body := rawGet(t, host, "/ax/static/style.css")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "--accent")
	for _, p := range []string{
		"/ax/static/../../go.mod",
		"/ax/static/../handler.go",
		"/ax/static/..%2f..%2fgo.mod",
		"/ax/static/..%2F..%2Fgo.mod",
		"/ax/static/%2e%2e/%2e%2e/go.mod",
		"/ax/static/%2e%2e%2f%2e%2e%2fgo.mod",
		"/ax/static/%252e%252e%252fgo.mod",
		"/ax/static/..%5c..%5cgo.mod",
		"/ax/static/..\\..\\go.mod",
		"/ax/static//etc/passwd",
		"/ax/static/%2fetc%2fpasswd",
		"/ax/static/./style.css/../../../go.mod",
		"/ax/static/style.css%00.js",
		"/ax/static/templates/layout.html",
		"/ax/static/../templates/layout.html",
		"/ax/static/..%2ftemplates%2flayout.html",
		"/ax/static/openapi.json",
	} {
		t.Run(p, func(t *testing.T) {
			status, body := rawGet(t, host, p)
			require.Contains(t, []int{http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusBadRequest, http.StatusNotFound}, status, body)
			require.NotContains(t, body, "module github.com/axsched/ax")
			require.NotContains(t, body, "root:")
			require.NotContains(t, body, "package axhttp")
			require.NotContains(t, body, `{{define`)
			// Follow a redirect, if any, once: it must not lead to a file
			// either.
			if status >= 300 && status < 400 {
				res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}).Get(f.srv.URL + p)
				if err == nil {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					require.NotContains(t, string(b), "module github.com/axsched/ax")
					require.NotContains(t, string(b), "root:")
				}
			}
			// The handler itself, with no mux in front to clean the path.
			req := httptest.NewRequest(http.MethodGet, "http://ax.test/", nil)
			req.URL.Path = strings.TrimPrefix(p, "/ax")
			req.URL.RawPath = ""
			req.RequestURI = req.URL.Path
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			require.NotEqual(t, http.StatusOK, rec.Code)
			require.NotContains(t, rec.Body.String(), "module github.com/axsched/ax")
		})
	}
}

// storeViewOf is what a refused request must leave as it was: every job
// (ID, kind, state, attempt) and every kind the Admin lists (pause
// state, when it changed, jobs by state, breaker).
type storeViewOf struct {
	Jobs  []string
	Kinds []string
}

func storeView(t *testing.T, f *fixture) storeViewOf {
	t.Helper()
	ctx := context.Background()
	var v storeViewOf
	cursor := ""
	for {
		list, err := f.s.Admin().List(ctx, ax.ListOptions{Order: ax.OldestFirst, Limit: store.MaxListLimit, Cursor: cursor})
		require.NoError(t, err)
		for _, j := range list.Jobs {
			v.Jobs = append(v.Jobs, fmt.Sprintf("%s %q %s %d", j.ID, j.Kind, j.State, j.Attempt))
		}
		if cursor = list.Cursor; cursor == "" {
			break
		}
	}
	kinds, err := f.s.Admin().Kinds(ctx)
	require.NoError(t, err)
	for _, k := range kinds {
		v.Kinds = append(v.Kinds, fmt.Sprintf("%q paused=%v at=%s jobs=%v breaker=%s", k.Kind, k.Paused, k.UpdatedAt.Format(time.RFC3339Nano), k.Jobs, BreakerSummary(k.Flow)))
	}
	return v
}

// xss is stored where users control text; every page must show it as
// text. It closes quotes and a <pre>, opens tags with handlers and a
// script.
const xss = `'></pre><img src=x onerror=alert(1)><script>alert(2)</script>`

// TestStoredXSSInert: a hostile kind, payload, metadata, unique key,
// error text or result is taken (these are data, not attacks on the
// store) and every dashboard page shows it escaped: no tag of it reaches
// the HTML. The pages' CSP forbids inline scripts besides.
func TestStoredXSSInert(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	submit := func(body string) uuid.UUID {
		t.Helper()
		res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", body)
		require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
		var out SubmitResponse
		require.NoError(t, json.Unmarshal(b, &out))
		return out.ID
	}
	// The text as a JSON string, with its < > & as they are (json.Marshal
	// would write \u003c, and the test would plant nothing).
	var qb bytes.Buffer
	enc := json.NewEncoder(&qb)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(xss))
	q := bytes.TrimSpace(qb.Bytes())
	cases := []struct {
		name  string
		plant func() uuid.UUID
	}{
		{"kind", func() uuid.UUID { return submit(`{"kind":` + string(q) + `}`) }},
		{"kind with a double quote", func() uuid.UUID { return deadJob(t, f.st, `"`+xss, "failed") }},
		{"payload value", func() uuid.UUID { return submit(`{"kind":"xss","payload":{"a":` + string(q) + `}}`) }},
		{"payload key", func() uuid.UUID { return submit(`{"kind":"xss","payload":{` + string(q) + `:1}}`) }},
		{"metadata", func() uuid.UUID {
			return submit(`{"kind":"xss","metadata":{` + string(q) + `:` + string(q) + `}}`)
		}},
		{"unique key", func() uuid.UUID { return submit(`{"kind":"xss","unique_key":` + string(q) + `}`) }},
		{"error text", func() uuid.UUID { return deadJob(t, f.st, "xss.error", xss+"\n\tat frame()") }},
		{"result", func() uuid.UUID {
			id := uuid.Must(uuid.NewV7())
			_, err := f.st.Insert(ctx, []store.InsertParams{{ID: id, Kind: "xss.result", Payload: []byte(`null`), Priority: 2, MaxAttempts: 1}})
			require.NoError(t, err)
			res, err := f.st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "xss.result", Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			_, err = f.st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: id, Token: res.Jobs[0].LeaseToken}, Outcome: store.OutcomeSucceeded, Result: []byte(`{"r":` + string(q) + `}`)}})
			require.NoError(t, err)
			return id
		}},
	}
	b := f.browser()
	b.login("app", testSecret)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := c.plant()
			rec, err := f.s.Admin().Get(ctx, id)
			require.NoError(t, err)
			for _, p := range []string{"/", "/jobs", "/jobs/" + id.String(), "/dead", "/kinds", "/jobs?kind=" + url.QueryEscape(rec.Kind)} {
				res, page := b.get(p)
				require.Equal(t, http.StatusOK, res.StatusCode, p)
				require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
				lower := strings.ToLower(page)
				for _, tag := range []string{"<img", "<script>alert"} {
					if strings.Contains(lower, tag) {
						t.Fatalf("%s shows %s raw", p, tag)
					}
				}
			}
			_, page := b.get("/jobs/" + id.String())
			require.Contains(t, page, "&lt;img src=x onerror=alert(1)&gt;", "the value is not shown")
		})
	}
}
