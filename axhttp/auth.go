package axhttp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Key is one API key: an application ID and its secret. Several keys can
// be valid at once, which is how secrets are rotated: add the new key,
// move clients to it, remove the old one.
type Key struct {
	// ID names the key; clients send it in X-AX-Key.
	ID string
	// Secret is the shared secret (at least 32 bytes of randomness).
	Secret []byte
	// ReadOnly keys may only read (GET and HEAD): dashboards, monitoring.
	ReadOnly bool
	// Kinds, when not empty, are the only job kinds the key may schedule
	// through the API: each a kind, or a prefix ending in "*"
	// ("email.*"); a job of another kind is refused with 403 and nothing
	// is stored. Empty: any kind, so a key can create kinds without
	// bound (each makes a row of the overview), which is why a key given
	// to a client outside the team should list its kinds.
	Kinds []string
}

// mayCreate reports whether the key may schedule jobs of kind.
func (k *Key) mayCreate(kind string) bool {
	if len(k.Kinds) == 0 {
		return true
	}
	for _, p := range k.Kinds {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(kind, prefix) || p == kind {
			return true
		}
	}
	return false
}

// MinSecretLength is the shortest secret Auth accepts.
const MinSecretLength = 32

// DefaultWindow is how far a request's timestamp may be from the server's
// clock.
const DefaultWindow = 5 * time.Minute

// NonceStore remembers the nonces of accepted requests for a while, so a
// request cannot be replayed within the timestamp window. With several
// API servers it must be shared (StoreNonces keeps them in the AX store);
// MemoryNonces serves one process.
type NonceStore interface {
	// Remember records nonce until the given time and reports whether it
	// was new (false: seen before and not yet expired).
	Remember(ctx context.Context, nonce string, until time.Time) (fresh bool, err error)
}

// Auth verifies signed requests (see Signer for the scheme). Use
// Middleware in front of a handler, or put your own authentication in front
// of the API instead and leave Auth out.
type Auth struct {
	keys   map[string]Key
	window time.Duration
	nonces NonceStore
	now    func() time.Time
}

// AuthConfig configures an Auth.
type AuthConfig struct {
	// Keys are the valid keys; at least one. IDs must be unique.
	Keys []Key
	// Window is how far a timestamp may be from the server's clock, in
	// either direction. Defaults to DefaultWindow.
	Window time.Duration
	// Nonces remembers nonces for 2 × Window. Required: use StoreNonces
	// with several servers, NewMemoryNonces with one.
	Nonces NonceStore
	// Clock is the server's clock. Defaults to time.Now.
	Clock func() time.Time
}

// ErrInvalidAuthConfig is returned by NewAuth for a config it cannot use.
var ErrInvalidAuthConfig = errors.New("axhttp: invalid auth config")

// NewAuth returns an Auth for cfg, or an error wrapping
// ErrInvalidAuthConfig.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	if len(cfg.Keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrInvalidAuthConfig)
	}
	if cfg.Nonces == nil {
		return nil, fmt.Errorf("%w: no nonce store", ErrInvalidAuthConfig)
	}
	a := &Auth{keys: make(map[string]Key, len(cfg.Keys)), window: cfg.Window, nonces: cfg.Nonces, now: cfg.Clock}
	for _, k := range cfg.Keys {
		switch {
		case k.ID == "" || len(k.ID) > 128:
			return nil, fmt.Errorf("%w: key ID must be 1 to 128 bytes", ErrInvalidAuthConfig)
		case len(k.Secret) < MinSecretLength:
			return nil, fmt.Errorf("%w: key %q: secret shorter than %d bytes", ErrInvalidAuthConfig, k.ID, MinSecretLength)
		case slices.Contains(k.Kinds, ""):
			return nil, fmt.Errorf("%w: key %q: an empty kind pattern", ErrInvalidAuthConfig, k.ID)
		}
		k.Kinds = slices.Clone(k.Kinds)
		if _, dup := a.keys[k.ID]; dup {
			return nil, fmt.Errorf("%w: key %q listed twice", ErrInvalidAuthConfig, k.ID)
		}
		a.keys[k.ID] = k
	}
	if a.window <= 0 {
		a.window = DefaultWindow
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// identityKey is the context key of the verified key.
type identityKey struct{}

// Identity is the key a request was verified with.
type Identity struct {
	// KeyID names the key (or, with your own authentication, the caller):
	// it appears in logs and keys the rate limit.
	KeyID string
	// ReadOnly callers may only read.
	ReadOnly bool
}

// IdentityFrom returns the identity Auth verified for the request of ctx.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// WithIdentity returns ctx carrying id: for authentication of your own in
// front of the handler (read-only identities are refused changes, and the
// key ID names the request in logs and rate limits).
func WithIdentity(ctx context.Context, id Identity) context.Context {
	noteKey(ctx, id.KeyID)
	return context.WithValue(ctx, identityKey{}, id)
}

// errUnauthorized is the one message of every signature failure: which
// check failed is logged, not told, so a caller learns nothing about the
// keys.
const errUnauthorized = "missing or invalid request signature"

// Middleware verifies every request's signature before next sees it:
// missing headers, an unknown key, a timestamp outside the window, a wrong
// signature or a reused nonce get 401; a read-only key asking for a change
// (any method but GET and HEAD) gets 403. The verified Identity is in the
// request's context. Signatures are compared in constant time. The
// headers (key, nonce, timestamp) are checked before the body is read and
// hashed; the nonce is recorded last, once the signature is right.
func (a *Auth) Middleware(next http.Handler) http.Handler {
	return a.handler(next, authHooks{})
}

// authHooks let the Handler count failures and apply the key's rate limit
// inside Auth's checks.
type authHooks struct {
	// failed, when set, is told of each request refused with 401, or
	// with 413 before its signature could be checked.
	failed func(r *http.Request)
	// admit, when set, is asked once the signature is verified and
	// before the nonce is recorded whether the key may make a request
	// now; when not, it has answered the request itself.
	admit func(w http.ResponseWriter, r *http.Request, keyID string) bool
}

// handler is Middleware with hooks.
func (a *Auth) handler(next http.Handler, hk authHooks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		spent := budgetSpent(r)
		if spent > 0 && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
			// An address without failure budget has no body read: only a
			// request without one can prove itself (its signature is
			// checked on the headers alone).
			refuseSpent(w, r, spent)
			return
		}
		refuse := func(err error) {
			var p *Problem
			if !errors.As(err, &p) {
				p = problem(http.StatusUnauthorized, ProblemUnauthorized, errUnauthorized)
			}
			logFrom(r.Context()).Info("request refused by authentication", zapError(err))
			if spent > 0 && (p.Status == http.StatusUnauthorized || p.Status == http.StatusRequestEntityTooLarge) {
				refuseSpent(w, r, spent)
				return
			}
			// A body over the limit read before the signature is checked
			// (chunked, so not refused up front) cost as much as a bad
			// signature: both count.
			if (p.Status == http.StatusUnauthorized || p.Status == http.StatusRequestEntityTooLarge) && hk.failed != nil {
				hk.failed(r)
			}
			writeProblem(w, r, p)
		}
		key, at, nonce, err := a.verifySignature(r)
		if err != nil {
			refuse(err)
			return
		}
		if hk.admit != nil && !hk.admit(w, r, key.ID) {
			return
		}
		if err := a.remember(r.Context(), key.ID, nonce, at); err != nil {
			refuse(err)
			return
		}
		id := Identity{KeyID: key.ID, ReadOnly: key.ReadOnly}
		if id.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeProblem(w, r, problem(http.StatusForbidden, ProblemForbidden, "this key may only read"))
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// verifySignature checks r's signature headers, then its signature, and
// returns its key, timestamp and nonce. What costs nothing is checked
// first: only a request with a known key and a timestamp in the window
// has its body read and hashed.
func (a *Auth) verifySignature(r *http.Request) (Key, time.Time, string, error) {
	keyID, ts, nonce, sig := r.Header.Get(HeaderKey), r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderNonce), r.Header.Get(HeaderSignature)
	if keyID == "" || ts == "" || nonce == "" || sig == "" {
		return Key{}, time.Time{}, "", errors.New("signature headers missing")
	}
	key, ok := a.keys[keyID]
	if !ok {
		return Key{}, time.Time{}, "", errors.New("unknown key")
	}
	if !validNonce(nonce) {
		return Key{}, time.Time{}, "", errors.New("malformed nonce")
	}
	if len(sig) != hex.EncodedLen(sha256.Size) {
		return Key{}, time.Time{}, "", errors.New("malformed signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Key{}, time.Time{}, "", errors.New("malformed timestamp")
	}
	now := a.now()
	at := time.Unix(sec, 0)
	if at.Before(now.Add(-a.window)) || at.After(now.Add(a.window)) {
		return Key{}, time.Time{}, "", fmt.Errorf("timestamp %s outside ±%s of %s", at.UTC().Format(time.RFC3339), a.window, now.UTC().Format(time.RFC3339))
	}
	body, err := readBody(r)
	if err != nil {
		return Key{}, time.Time{}, "", err
	}
	if !signatureMatches(key.Secret, r, sec, nonce, body, sig) {
		return Key{}, time.Time{}, "", errors.New("signature mismatch")
	}
	return key, at, nonce, nil
}

// remember records a verified request's nonce; a nonce seen before is an
// error (401), a nonce store that fails a problem (503). It comes after
// the signature, so only holders of a key can fill the nonce store, and
// after the key's rate limit, so a refused request can be sent again.
func (a *Auth) remember(ctx context.Context, keyID, nonce string, at time.Time) error {
	fresh, err := a.nonces.Remember(ctx, keyID+":"+nonce, at.Add(2*a.window))
	if err != nil {
		return problem(http.StatusServiceUnavailable, ProblemUnavailable, "cannot record the request nonce")
	}
	if !fresh {
		return errors.New("nonce reused")
	}
	return nil
}

// signatureMatches recomputes r's signature over the path and query as the
// client sent them (RequestURI, which http.StripPrefix leaves alone) and
// compares it with sig in constant time.
func signatureMatches(secret []byte, r *http.Request, ts int64, nonce string, body []byte, sig string) bool {
	path, query := r.URL.EscapedPath(), r.URL.RawQuery
	if r.RequestURI != "" {
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
			path, query = u.EscapedPath(), u.RawQuery
		}
	}
	sum := sha256.Sum256(body)
	sts, err := StringToSign(r.Method, path, query, ts, nonce, hex.EncodeToString(sum[:]))
	if err != nil {
		return false
	}
	want, err := hex.DecodeString(Signature(secret, sts))
	got, err2 := hex.DecodeString(sig)
	return err == nil && err2 == nil && hmac.Equal(want, got)
}

// readBody reads r's body (bounded by the body limit middleware) and puts
// it back for the handler.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, problem(http.StatusRequestEntityTooLarge, ProblemTooLarge,
				fmt.Sprintf("the body is over %d bytes", tooBig.Limit))
		}
		return nil, fmt.Errorf("read body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// VerifyRequest checks that r (a completion callback, say) was signed with
// secret within window of now, for receivers: it returns nil when the
// signature is valid. It reads r's body and puts it back. Receivers should
// also remember nonces to refuse replays, as Auth does.
func VerifyRequest(r *http.Request, secret []byte, window time.Duration, now time.Time) error {
	ts, nonce, sig := r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderNonce), r.Header.Get(HeaderSignature)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || !validNonce(nonce) || sig == "" {
		return errors.New("axhttp: missing or malformed signature headers")
	}
	at := time.Unix(sec, 0)
	if at.Before(now.Add(-window)) || at.After(now.Add(window)) {
		return errors.New("axhttp: timestamp outside the window")
	}
	body, err := readBody(r)
	if err != nil {
		return fmt.Errorf("axhttp: %w", err)
	}
	if !signatureMatches(secret, r, sec, nonce, body, sig) {
		return errors.New("axhttp: signature mismatch")
	}
	return nil
}

// MemoryNonces is a NonceStore for one process: a map of nonces to their
// expiry, swept as it grows. It refuses (returns an error) rather than
// grows past its bound, so a flood of valid requests cannot exhaust
// memory.
type MemoryNonces struct {
	mu      sync.Mutex
	max     int
	now     func() time.Time
	entries map[string]time.Time
}

// NewMemoryNonces returns a MemoryNonces holding at most max nonces
// (default 1,000,000 when max <= 0).
func NewMemoryNonces(max int) *MemoryNonces {
	if max <= 0 {
		max = 1_000_000
	}
	return &MemoryNonces{max: max, now: time.Now, entries: make(map[string]time.Time)}
}

// Remember implements NonceStore.
func (m *MemoryNonces) Remember(_ context.Context, nonce string, until time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if exp, ok := m.entries[nonce]; ok && exp.After(now) {
		return false, nil
	}
	if len(m.entries) >= m.max {
		for n, exp := range m.entries {
			if !exp.After(now) {
				delete(m.entries, n)
			}
		}
		if len(m.entries) >= m.max {
			return false, errors.New("axhttp: nonce store full")
		}
	}
	m.entries[nonce] = until
	return true, nil
}
