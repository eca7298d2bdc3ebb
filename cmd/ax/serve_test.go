package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/axhttp"
	"github.com/axsched/ax/store/memstore"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const (
	serveSecret  = "serve-test-secret-0123456789abcdefghij"
	viewerSecret = "viewer-test-secret-0123456789abcdefghi"
)

// TestServe: ax serve answers signed API requests and serves the
// dashboard below its prefix, refuses unsigned ones, and stops cleanly
// when interrupted.
func TestServe(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte("# API keys\napp "+serveSecret+"\n\nviewer "+viewerSecret+" read-only\n"), 0o600))
	st := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--prefix", "/ax", "--keys-file", keys},
			strings.NewReader(""), &out, &errOut, memOpener{st: st, m: &fakeMigrator{}})
	}()
	re := regexp.MustCompile(`listening on (http://\S+)/`)
	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		require.True(t, time.Now().Before(deadline), "ax serve did not start: %s %s", out.String(), errOut.String())
		time.Sleep(5 * time.Millisecond)
	}
	require.True(t, strings.HasSuffix(base, "/ax"), base)

	send := func(s *axhttp.Signer, method, path, body string) (int, string) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, base+path, rd)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if s != nil {
			require.NoError(t, s.Sign(req))
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	app := &axhttp.Signer{KeyID: "app", Secret: []byte(serveSecret)}
	viewer := &axhttp.Signer{KeyID: "viewer", Secret: []byte(viewerSecret)}
	status, body := send(app, "POST", "/api/v1/jobs", `{"kind":"email","payload":{"to":"ada@example.com"},"unique_key":"k1"}`)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = send(app, "GET", "/api/v1/jobs?kind=email", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "ada@example.com")
	status, _ = send(viewer, "GET", "/api/v1/stats", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = send(viewer, "POST", "/api/v1/kinds/email/pause", "")
	require.Equal(t, http.StatusForbidden, status)
	status, _ = send(nil, "GET", "/api/v1/stats", "")
	require.Equal(t, http.StatusUnauthorized, status)
	status, body = send(nil, "GET", "/login", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `name="secret"`)

	cancel()
	select {
	case c := <-code:
		require.Equal(t, exitOK, c, errOut.String())
	case <-time.After(15 * time.Second):
		t.Fatal("ax serve did not stop")
	}
	require.Contains(t, out.String(), "ax serve: stopped")
	require.NotContains(t, errOut.String(), serveSecret)
	require.Contains(t, errOut.String(), `"request_id"`, "requests are logged")
}

// TestServeUsage: a missing or bad keys file is a usage error that tells
// no secret.
func TestServeUsage(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("app tooshort\n"), 0o600))
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("app "+serveSecret+" admin\n"), 0o600))
	for _, args := range [][]string{
		{"serve"},
		{"serve", "--keys-file", filepath.Join(dir, "missing")},
		{"serve", "--keys-file", short},
		{"serve", "--keys-file", bad},
		{"serve", "--keys-file", short, "--no-auth"},
		{"serve", "--no-auth", "--tls-cert", "x"},
	} {
		var out, errOut bytes.Buffer
		c := run(context.Background(), args, strings.NewReader(""), &out, &errOut, memOpener{st: memstore.New(), m: &fakeMigrator{}})
		require.Equal(t, exitUsage, c, "%v: %s", args, errOut.String())
		require.NotContains(t, errOut.String(), serveSecret)
		require.NotContains(t, errOut.String(), "tooshort")
	}
}

// TestServeTLS: with a certificate ax serve speaks HTTPS and marks the
// dashboard's cookies Secure.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile)
	keys := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(keys, []byte("app "+serveSecret+"\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--keys-file", keys, "--tls-cert", certFile, "--tls-key", keyFile},
			strings.NewReader(""), &out, &errOut, memOpener{st: memstore.New(), m: &fakeMigrator{}})
	}()
	re := regexp.MustCompile(`listening on (https://\S+)/`)
	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		require.True(t, time.Now().Before(deadline), "ax serve did not start: %s %s", out.String(), errOut.String())
		time.Sleep(5 * time.Millisecond)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test's self-signed certificate
	res, err := client.Get(base + "/login")
	require.NoError(t, err)
	res.Body.Close()
	client.CloseIdleConnections()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotEmpty(t, res.Cookies())
	for _, c := range res.Cookies() {
		require.True(t, c.Secure, "cookie %s not Secure over TLS", c.Name)
		require.True(t, c.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	}
	cancel()
	require.Equal(t, exitOK, <-code, errOut.String())
}

// writeSelfSigned writes a certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ax test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
}
