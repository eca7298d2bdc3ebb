package axhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

var (
	testSecret   = []byte("0123456789abcdef0123456789abcdef-secret")
	otherSecret  = []byte("fedcba9876543210fedcba9876543210-secret")
	readerSecret = []byte("reader-0123456789abcdef0123456789abcdef")
)

// authServer returns a server whose handler, behind protect, counts the
// requests that reached it and echoes the body it was given.
func authServer(t *testing.T, now func() time.Time, limit RateLimit) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	auth, err := NewAuth(AuthConfig{
		Keys:   []Key{{ID: "app", Secret: testSecret}, {ID: "app-next", Secret: otherSecret}, {ID: "dash", Secret: readerSecret, ReadOnly: true}},
		Nonces: NewMemoryNonces(0),
		Clock:  now,
	})
	require.NoError(t, err)
	var reached atomic.Int64
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		b, _ := io.ReadAll(r.Body)
		id, _ := IdentityFrom(r.Context())
		w.Header().Set("X-Key", id.KeyID)
		_, _ = w.Write(b)
	})
	mux := http.NewServeMux()
	mux.Handle("/ax/", http.StripPrefix("/ax", protect(zap.NewNop(), 1024, auth, limit, inner)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &reached
}

func signed(t *testing.T, s Signer, method, url, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	require.NoError(t, s.Sign(req))
	return req
}

func do(t *testing.T, req *http.Request) (*http.Response, Problem) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var p Problem
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
		require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	}
	return res, p
}

// TestAuthAcceptsSignedRequests: a signed request reaches the handler with
// its body intact and its key known, under a mount prefix, with query
// parameters in any order; either of two keys works (rotation).
func TestAuthAcceptsSignedRequests(t *testing.T) {
	srv, reached := authServer(t, time.Now, RateLimit{})
	for _, s := range []Signer{{KeyID: "app", Secret: testSecret}, {KeyID: "app-next", Secret: otherSecret}} {
		req := signed(t, s, http.MethodPost, srv.URL+"/ax/api/v1/jobs?b=2&a=1&a=0&x=%2F", `{"kind":"k"}`)
		res, p := do(t, req)
		require.Equal(t, http.StatusOK, res.StatusCode, "%+v", p)
		require.Equal(t, s.KeyID, res.Header.Get("X-Key"))
		require.NotEmpty(t, res.Header.Get(HeaderRequestID))
	}
	require.Equal(t, int64(2), reached.Load())
}

// TestAuthRefuses: every way a request can be wrong is refused with the
// right status and a problem document that gives nothing away, and the
// handler never runs.
func TestAuthRefuses(t *testing.T) {
	now := time.Now()
	srv, reached := authServer(t, func() time.Time { return now }, RateLimit{})
	app := Signer{KeyID: "app", Secret: testSecret, Clock: func() time.Time { return now }}
	url := srv.URL + "/ax/api/v1/jobs"
	cases := []struct {
		name   string
		req    func() *http.Request
		status int
		typ    string
	}{
		{"no signature", func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, url, nil)
			return r
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"wrong secret", func() *http.Request {
			return signed(t, Signer{KeyID: "app", Secret: otherSecret}, http.MethodGet, url, "")
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"unknown key", func() *http.Request {
			return signed(t, Signer{KeyID: "ghost", Secret: testSecret}, http.MethodGet, url, "")
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"expired timestamp", func() *http.Request {
			old := app
			old.Clock = func() time.Time { return now.Add(-DefaultWindow - time.Second) }
			return signed(t, old, http.MethodGet, url, "")
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"timestamp from the future", func() *http.Request {
			late := app
			late.Clock = func() time.Time { return now.Add(DefaultWindow + time.Second) }
			return signed(t, late, http.MethodGet, url, "")
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"body changed after signing", func() *http.Request {
			r := signed(t, app, http.MethodPost, url, `{"kind":"a"}`)
			r.Body = io.NopCloser(strings.NewReader(`{"kind":"b"}`))
			r.ContentLength = int64(len(`{"kind":"b"}`))
			return r
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"path changed after signing", func() *http.Request {
			r := signed(t, app, http.MethodGet, url, "")
			r.URL.Path = "/ax/api/v1/nodes"
			return r
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"query changed after signing", func() *http.Request {
			r := signed(t, app, http.MethodGet, url+"?state=dead", "")
			r.URL.RawQuery = "state=succeeded"
			return r
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"malformed nonce", func() *http.Request {
			r := signed(t, app, http.MethodGet, url, "")
			r.Header.Set(HeaderNonce, "short")
			return r
		}, http.StatusUnauthorized, ProblemUnauthorized},
		{"read-only key changing", func() *http.Request {
			return signed(t, Signer{KeyID: "dash", Secret: readerSecret}, http.MethodPost, url, `{}`)
		}, http.StatusForbidden, ProblemForbidden},
		{"oversized body", func() *http.Request {
			return signed(t, app, http.MethodPost, url, strings.Repeat("x", 2048))
		}, http.StatusRequestEntityTooLarge, ProblemTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, p := do(t, c.req())
			require.Equal(t, c.status, res.StatusCode)
			require.Equal(t, c.typ, p.Type)
			require.Equal(t, c.status, p.Status)
			require.Equal(t, res.Header.Get(HeaderRequestID), p.Instance)
			for _, secret := range [][]byte{testSecret, otherSecret, readerSecret} {
				require.NotContains(t, p.Detail, string(secret))
			}
			require.NotContains(t, strings.ToLower(p.Detail), "signature mismatch", "the detail says which check failed")
		})
	}
	require.Zero(t, reached.Load(), "a refused request reached the handler")
}

// TestAuthRefusesReplay: the same signed request sent twice is refused the
// second time (its nonce was seen within the window).
func TestAuthRefusesReplay(t *testing.T) {
	srv, reached := authServer(t, time.Now, RateLimit{})
	req := signed(t, Signer{KeyID: "app", Secret: testSecret}, http.MethodPost, srv.URL+"/ax/api/v1/jobs", `{"kind":"k"}`)
	replay := req.Clone(context.Background())
	replay.Body, _ = req.GetBody()
	res, _ := do(t, req)
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, p := do(t, replay)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Equal(t, ProblemUnauthorized, p.Type)
	require.Equal(t, int64(1), reached.Load())
}

// TestRateLimitPerKey: a key over its rate gets 429 with Retry-After;
// another key is not affected.
func TestRateLimitPerKey(t *testing.T) {
	srv, _ := authServer(t, time.Now, RateLimit{PerSecond: 1, Burst: 2})
	get := func(s Signer) *http.Response {
		res, _ := do(t, signed(t, s, http.MethodGet, srv.URL+"/ax/api/v1/jobs", ""))
		return res
	}
	app, next := Signer{KeyID: "app", Secret: testSecret}, Signer{KeyID: "app-next", Secret: otherSecret}
	require.Equal(t, http.StatusOK, get(app).StatusCode)
	require.Equal(t, http.StatusOK, get(app).StatusCode)
	res := get(app)
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	require.Equal(t, http.StatusOK, get(next).StatusCode)
}

// TestVerifyRequest: a receiver of signed callbacks verifies them.
func TestVerifyRequest(t *testing.T) {
	now := time.Now()
	body := []byte(`{"job_id":"x","state":"succeeded"}`)
	req := httptest.NewRequest(http.MethodPost, "https://receiver.example/hooks/ax?tenant=7", bytes.NewReader(body))
	require.NoError(t, Signer{KeyID: "callbacks", Secret: testSecret, Clock: func() time.Time { return now }}.Sign(req))
	require.NoError(t, VerifyRequest(req, testSecret, time.Minute, now))
	got, _ := io.ReadAll(req.Body)
	require.Equal(t, body, got, "the body was not put back")
	require.Error(t, VerifyRequest(req, otherSecret, time.Minute, now))
	require.Error(t, VerifyRequest(req, testSecret, time.Minute, now.Add(2*time.Minute)))
}

// TestStringToSignIsStable pins the scheme: clients in other languages
// reproduce this exact string and signature.
func TestStringToSignIsStable(t *testing.T) {
	sts, err := StringToSign("post", "/ax/api/v1/jobs", "b=2&a=1", 1767225600, "0123456789abcdef",
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
	require.NoError(t, err)
	require.Equal(t, "AX-HMAC-SHA256\nPOST\n/ax/api/v1/jobs\na=1&b=2\n1767225600\n0123456789abcdef\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", sts)
	// printf '%s' "$sts" | openssl dgst -sha256 -hmac secret
	require.Equal(t, "7a05ea597a8cade70bd027deec36b14247ce3486f531b73ebc08c1eb19a14ca0", Signature([]byte("secret"), sts))
}
