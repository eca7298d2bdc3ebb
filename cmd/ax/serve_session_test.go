package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store/memstore"
)

// startServe runs ax serve with args on st (keys app and viewer) and
// returns its base URL; it is stopped when the test ends.
func startServe(t *testing.T, st *memstore.Store, args ...string) (base string, errOut *syncBuffer) {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte("app "+serveSecret+"\nviewer "+viewerSecret+" read-only\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	errOut = &syncBuffer{}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--keys-file", keys}, args...),
			strings.NewReader(""), &out, errOut, memOpener{st: st, m: &fakeMigrator{}})
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, exitOK, <-code, errOut.String())
	})
	re := regexp.MustCompile(`listening on (http://\S+)/`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1], errOut
		}
		require.True(t, time.Now().Before(deadline), "ax serve did not start: %s %s", out.String(), errOut.String())
		time.Sleep(5 * time.Millisecond)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// dashLogin logs a cookie-keeping client in to the dashboard at base.
func dashLogin(t *testing.T, base, keyID, secret string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(base + "/login")
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := csrfField.FindSubmatch(b)
	require.NotNil(t, m)
	res, err = c.PostForm(base+"/login", url.Values{"csrf": {string(m[1])}, "key_id": {keyID}, "secret": {secret}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	return c
}

func getStatus(t *testing.T, c *http.Client, u string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res
}

// TestSessionsRevoke: ax sessions revoke KEY ends the key's dashboard
// sessions on a running ax serve on the same store, and no other key's.
func TestSessionsRevoke(t *testing.T) {
	st := memstore.New()
	base, _ := startServe(t, st)
	app := dashLogin(t, base, "app", serveSecret)
	viewer := dashLogin(t, base, "viewer", viewerSecret)
	require.Equal(t, http.StatusOK, getStatus(t, app, base+"/kinds").StatusCode)

	cli := func(t *testing.T, args ...string) (string, string, int) {
		var out, errOut strings.Builder
		code := run(t.Context(), args, strings.NewReader(""), &out, &errOut, memOpener{st: st, m: &fakeMigrator{}})
		return out.String(), errOut.String(), code
	}
	out := mustCLI(t, cli, "sessions", "revoke", "app")
	require.Contains(t, out, "revoked the dashboard sessions of key app")
	require.Equal(t, http.StatusSeeOther, getStatus(t, app, base+"/kinds").StatusCode, "a revoked session")
	require.Equal(t, http.StatusOK, getStatus(t, viewer, base+"/kinds").StatusCode, "another key's session")

	_, _, code := cli(t, "sessions", "revoke")
	require.Equal(t, exitUsage, code)
}

// TestServeDefaultLimits: ax serve, started as the README starts it,
// answers a flood of unsigned requests from one address with 429 and
// Retry-After after its failure budget (20); with --trusted-proxy the
// budget is the forwarded client's, and --failure-rate 0 turns it off.
// (Issue 25 defect 3: no limit by default.)
func TestServeDefaultLimits(t *testing.T) {
	flood := func(base string, xff string) (refused int, last *http.Response) {
		for range defaultFailureBurst + 5 {
			last = getStatus(t, http.DefaultClient, base+"/api/v1/stats", "X-Forwarded-For", xff)
			if last.StatusCode == http.StatusTooManyRequests {
				refused++
			}
		}
		return refused, last
	}
	base, _ := startServe(t, memstore.New())
	refused, last := flood(base, "198.51.100.1")
	require.Equal(t, 5, refused)
	require.NotEmpty(t, last.Header.Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, getStatus(t, http.DefaultClient, base+"/api/v1/stats", "X-Forwarded-For", "198.51.100.2").StatusCode,
		"without --trusted-proxy, X-Forwarded-For is ignored")

	base, _ = startServe(t, memstore.New(), "--trusted-proxy", "127.0.0.1")
	refused, _ = flood(base, "198.51.100.1")
	require.Equal(t, 5, refused)
	require.Equal(t, http.StatusUnauthorized, getStatus(t, http.DefaultClient, base+"/api/v1/stats", "X-Forwarded-For", "198.51.100.2").StatusCode,
		"behind a trusted proxy, another client keeps its budget")

	base, _ = startServe(t, memstore.New(), "--failure-rate", "0")
	refused, _ = flood(base, "")
	require.Zero(t, refused)
}

// TestServeSessionFlags: --secure-cookies marks the cookies Secure over
// plain HTTP (behind a TLS-terminating proxy); without AX_SESSION_KEY ax
// serve warns that sessions will not survive it; a bad --trusted-proxy is
// a usage error.
func TestServeSessionFlags(t *testing.T) {
	t.Setenv("AX_SESSION_KEY", "")
	base, errOut := startServe(t, memstore.New(), "--secure-cookies")
	res := getStatus(t, http.DefaultClient, base+"/login")
	require.NotEmpty(t, res.Cookies())
	for _, c := range res.Cookies() {
		require.True(t, c.Secure, "cookie %s", c.Name)
	}
	require.Contains(t, errOut.String(), "AX_SESSION_KEY is not set")

	var o, e strings.Builder
	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte("app "+serveSecret+"\n"), 0o600))
	c := run(context.Background(), []string{"serve", "--keys-file", keys, "--trusted-proxy", "nonsense"}, strings.NewReader(""), &o, &e,
		memOpener{st: memstore.New(), m: &fakeMigrator{}})
	require.Equal(t, exitUsage, c, e.String())
}
