package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axhttp"
	"github.com/axsched/ax/store/memstore"
)

var testKey = axhttp.Key{ID: "demo", Secret: []byte("example-secret-0123456789abcdefghijkl")}

// newTestApp runs the example's App on memstore behind a test server.
func newTestApp(t *testing.T) (*App, *httptest.Server) {
	t.Helper()
	app, err := NewApp(memstore.New(), Options{Keys: []axhttp.Key{testKey}, Tune: func(c *ax.Config) {
		c.PollInterval = 20 * time.Millisecond
		c.RetryPolicy = ax.RetryPolicyFunc(func(int, error) time.Duration { return 10 * time.Millisecond })
	}})
	require.NoError(t, err)
	t.Cleanup(app.Close)
	require.NoError(t, app.Scheduler.Start(t.Context()))
	t.Cleanup(func() { _ = app.Scheduler.Stop(t.Context()) })
	srv := httptest.NewServer(app.Handler)
	t.Cleanup(srv.Close)
	return app, srv
}

// TestExampleAPI: a Go client signs a submission and reads the job back
// once it ran; a bad email dies after its attempts and shows in the dead
// letters.
func TestExampleAPI(t *testing.T) {
	_, srv := newTestApp(t)
	signer := axhttp.Signer{KeyID: testKey.ID, Secret: testKey.Secret}
	call := func(method, path, body string) (int, []byte) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, srv.URL+"/ax"+path, rd)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		require.NoError(t, signer.Sign(req))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	status, b := call("POST", "/api/v1/jobs", `{"kind":"email","payload":{"to":"ada@example.com"},"unique_key":"welcome-ada"}`)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	var sub axhttp.SubmitResponse
	require.NoError(t, json.Unmarshal(b, &sub))
	status, b = call("POST", "/api/v1/jobs", `{"kind":"email","payload":{"to":"bob@example.invalid"}}`)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, b = call("GET", "/api/v1/jobs/"+sub.ID.String(), "")
		_, d := call("GET", "/api/v1/jobs/count?state=dead&kind=email", "")
		if strings.Contains(string(b), `"state":"succeeded"`) && string(d) == "{\"count\":1}\n" {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs did not finish: %s %s", b, d)
		time.Sleep(20 * time.Millisecond)
	}
	res, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "/ leads to the dashboard's login")
	require.Equal(t, "/ax/login", res.Request.URL.Path)
}

// requireTools skips unless bash, openssl and curl are installed.
func requireTools(t *testing.T) {
	for _, tool := range []string{"bash", "openssl", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: the curl recipe cannot be checked", tool)
		}
	}
}

// axcurl runs axcurl.sh with env and returns its output.
func axcurl(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"axcurl.sh"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// TestCurlRecipeSignsAsGo: axcurl.sh (openssl) computes the same string
// to sign and signature as the Go signer, for queries needing
// re-escaping and sorting, bodies and mount prefixes.
func TestCurlRecipeSignsAsGo(t *testing.T) {
	requireTools(t)
	cases := []struct{ method, base, target, body string }{
		{"GET", "http://127.0.0.1:8080/ax", "/api/v1/jobs", ""},
		{"get", "http://127.0.0.1:8080", "/api/v1/jobs?state=dead,retrying&kind=email&limit=10", ""},
		{"GET", "http://h:1/ax", "/api/v1/jobs?meta=tenant%3Dacme&meta=a=b&kind=e+mail&kind=%C3%A9t%C3%A9&run_after=2026-01-02T15:04:05Z", ""},
		{"GET", "http://h:1/ax", "/api/v1/jobs?b=2&a=1&a=0&x=%2F&y=~&z=", ""},
		{"POST", "https://ax.example.com/ops/ax", "/api/v1/jobs", `{"kind":"email","payload":{"to":"ada@example.com","n":"ünï"}}`},
		{"POST", "http://h:1/ax", "/api/v1/kinds/email/pause", ""},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.target, func(t *testing.T) {
			out := axcurl(t, []string{"AX_URL=" + c.base, "AX_KEY_ID=demo", "AX_SECRET=" + string(testKey.Secret),
				"AX_TIMESTAMP=1767225600", "AX_NONCE=0123456789abcdef0123", "AX_PRINT_SIGNATURE=1"}, c.method, c.target, c.body)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			gotSTS, gotSig := strings.Join(lines[:len(lines)-1], "\n"), lines[len(lines)-1]

			req, err := http.NewRequest(strings.ToUpper(c.method), c.base+c.target, strings.NewReader(c.body))
			require.NoError(t, err)
			sum := sha256.Sum256([]byte(c.body))
			sts, err := axhttp.StringToSign(req.Method, req.URL.EscapedPath(), req.URL.RawQuery, 1767225600, "0123456789abcdef0123", hex.EncodeToString(sum[:]))
			require.NoError(t, err)
			require.Equal(t, sts, gotSTS)
			require.Equal(t, axhttp.Signature(testKey.Secret, sts), gotSig)
		})
	}
}

// TestCurlRecipeAgainstServer: axcurl.sh's requests are accepted by the
// example's server.
func TestCurlRecipeAgainstServer(t *testing.T) {
	requireTools(t)
	_, srv := newTestApp(t)
	env := []string{"AX_URL=" + srv.URL + "/ax", "AX_KEY_ID=demo", "AX_SECRET=" + string(testKey.Secret)}
	out := axcurl(t, env, "POST", "/api/v1/jobs", `{"kind":"email","payload":{"to":"ada@example.com"}}`)
	require.True(t, strings.HasSuffix(out, "\n201\n"), out)
	out = axcurl(t, env, "GET", "/api/v1/jobs?kind=email&state=scheduled,running,succeeded&limit=5")
	require.True(t, strings.HasSuffix(out, "\n200\n"), out)
	require.Contains(t, out, "ada@example.com")
	out = axcurl(t, []string{"AX_URL=" + srv.URL + "/ax", "AX_KEY_ID=demo", "AX_SECRET=wrong-secret-0123456789abcdefghijklmn"}, "GET", "/api/v1/stats")
	require.True(t, strings.HasSuffix(out, "\n401\n"), out)
}

// TestReadmeCurlSnippet runs the curl and openssl lines of the README's
// "HTTP API and dashboard" section against the example's server.
func TestReadmeCurlSnippet(t *testing.T) {
	requireTools(t)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	section := string(readme)
	i := strings.Index(section, "## HTTP API and dashboard")
	require.NotEqual(t, -1, i, "README has no HTTP API and dashboard section")
	section = section[i:]
	start := strings.Index(section, "```sh\n")
	require.NotEqual(t, -1, start)
	snippet := section[start+len("```sh\n"):]
	snippet = snippet[:strings.Index(snippet, "```")]

	secret := "orders-secret-0123456789abcdefghijklmnop"
	app, err := NewApp(memstore.New(), Options{Keys: []axhttp.Key{{ID: "orders", Secret: []byte(secret)}}})
	require.NoError(t, err)
	t.Cleanup(app.Close)
	srv := httptest.NewServer(app.Handler)
	t.Cleanup(srv.Close)
	script := strings.ReplaceAll(snippet, "http://127.0.0.1:8080", srv.URL)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "AX_SECRET="+secret)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"duplicate":false`, "the README's request was not accepted")
}
