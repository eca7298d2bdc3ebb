package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/axhttp"
	"github.com/axsched/ax/store/memstore"
)

// TestServeCallbackHosts: with --callback-host, ax serve takes callback
// URLs to the listed hosts and domains only (issue 25 defect 6); a value
// that is not a host name is a usage error.
func TestServeCallbackHosts(t *testing.T) {
	base, _ := startServe(t, memstore.New(), "--callback-host", "hooks.example.com,.partner.example")
	app := &axhttp.Signer{KeyID: "app", Secret: []byte(serveSecret)}
	cases := []struct {
		url    string
		status int
	}{
		{"https://hooks.example.com/done", http.StatusCreated},
		{"https://api.partner.example/done", http.StatusCreated},
		{"https://partner.example/done", http.StatusCreated},
		{"https://evil.example/done", http.StatusBadRequest},
		{"https://hooks.example.com.evil.example/done", http.StatusBadRequest},
		{"https://notpartner.example/done", http.StatusBadRequest},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			req, err := http.NewRequest("POST", base+"/api/v1/jobs", strings.NewReader(`{"kind":"email","callback_url":"`+c.url+`"}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			require.NoError(t, app.Sign(req))
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, c.status, res.StatusCode, string(b))
		})
	}

	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte("app "+serveSecret+"\n"), 0o600))
	for _, bad := range []string{"https://hooks.example.com", "hooks.example.com:443", "..example.com", "."} {
		var o, e strings.Builder
		c := run(context.Background(), []string{"serve", "--keys-file", keys, "--callback-host", bad}, strings.NewReader(""), &o, &e,
			memOpener{st: memstore.New(), m: &fakeMigrator{}})
		require.Equal(t, exitUsage, c, "%s: %s", bad, e.String())
	}
}
