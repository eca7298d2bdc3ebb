package axhttp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// The dashboard's sessions and CSRF tokens.
//
// With Config.Auth, the dashboard asks for a login: a key ID and its
// secret, checked in constant time like a signature. A good login sets
// the session cookie ax_session: base64url(JSON{key ID, expiry, random
// session ID, fingerprint of the key's secret}) "." base64url(HMAC-SHA256
// (SessionKey, that JSON)). It is HttpOnly, SameSite=Strict, scoped to the
// mount point, and Secure over TLS (or with Config.SecureCookies). Each
// request re-reads the key: a key removed from Auth, or whose secret
// changed, ends its sessions, and a read-only key gets the read-only
// dashboard.
//
// Every change is a POST carrying a CSRF token in the form field "csrf":
// base64url(HMAC-SHA256(SessionKey, "csrf" 0x00 binding)), where the
// binding is the session's random ID when logged in, and otherwise the
// random value of the ax_csrf cookie (a signed double-submit token: the
// login form, and dashboards behind the user's own authentication). A
// missing or wrong token gets 403 and changes nothing. Browsers' Fetch
// Metadata is checked too (http.CrossOriginProtection), refusing
// cross-site POSTs before any token is read.

const (
	sessionCookie = "ax_session"
	csrfCookie    = "ax_csrf"
	flashCookie   = "ax_flash"
)

type sessions struct {
	key    []byte
	ttl    time.Duration
	auth   *Auth
	now    func() time.Time
	secure bool
}

// session is the content of a session cookie.
type session struct {
	KeyID       string `json:"k"`
	Expires     int64  `json:"e"`
	ID          string `json:"n"`
	Fingerprint string `json:"f"`
}

// dashState is what the session middleware learned of a dashboard
// request.
type dashState struct {
	loggedIn bool
	identity Identity
	// binding is what the request's CSRF token is bound to.
	binding string
}

type dashStateKey struct{}

func stateFrom(ctx context.Context) *dashState {
	st, _ := ctx.Value(dashStateKey{}).(*dashState)
	if st == nil {
		return &dashState{}
	}
	return st
}

func (s *sessions) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return m.Sum(nil)
}

// fingerprint identifies a key's secret without revealing it.
func fingerprint(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ax-dashboard-session"))
	return hex.EncodeToString(m.Sum(nil)[:12])
}

func (s *sessions) encode(sess session) string {
	b, _ := json.Marshal(sess)
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(s.mac("session", string(b)))
}

// decode returns the session of a cookie value whose MAC is right, which
// has not expired and whose key still exists with the same secret.
func (s *sessions) decode(v string) (session, Key, bool) {
	payload, sig, ok := strings.Cut(v, ".")
	if !ok || s.auth == nil {
		return session{}, Key{}, false
	}
	b, err1 := base64.RawURLEncoding.DecodeString(payload)
	got, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(got, s.mac("session", string(b))) {
		return session{}, Key{}, false
	}
	var sess session
	if json.Unmarshal(b, &sess) != nil || s.now().Unix() >= sess.Expires || sess.ID == "" {
		return session{}, Key{}, false
	}
	key, ok := s.auth.keys[sess.KeyID]
	if !ok || !hmac.Equal([]byte(fingerprint(key.Secret)), []byte(sess.Fingerprint)) {
		return session{}, Key{}, false
	}
	return sess, key, true
}

// csrfToken is the token of forms whose request has binding.
func (s *sessions) csrfToken(binding string) string {
	if binding == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", binding))
}

// checkCSRF reports whether r's form carries the token of its binding.
func (s *sessions) checkCSRF(r *http.Request) bool {
	st := stateFrom(r.Context())
	want := s.csrfToken(st.binding)
	got := r.PostFormValue("csrf")
	return want != "" && got != "" && hmac.Equal([]byte(got), []byte(want))
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// cookie returns a cookie of the dashboard with the usual attributes.
func (s *sessions) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: basePath(r) + "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure || r.TLS != nil}
}

// login opens a session for key on w.
func (s *sessions) login(w http.ResponseWriter, r *http.Request, key Key) {
	sess := session{KeyID: key.ID, Expires: s.now().Add(s.ttl).Unix(), ID: randomToken(), Fingerprint: fingerprint(key.Secret)}
	http.SetCookie(w, s.cookie(r, sessionCookie, s.encode(sess), int(s.ttl/time.Second)))
}

// logout ends the session on w.
func (s *sessions) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, s.cookie(r, sessionCookie, "", -1))
}

// publicPath reports whether the dashboard serves path without a
// session: the login form and the static assets.
func publicPath(path string) bool {
	return path == "/login" || strings.HasPrefix(path, "/static/")
}

// middleware finds who is asking: with Auth, the session (a request
// without one is sent to the login form, or refused when it is not a
// page view); without, the identity the user's middleware set, if any.
// It makes sure a CSRF binding exists.
func (s *sessions) middleware(h *Handler, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := &dashState{}
		if s.auth == nil {
			st.identity, _ = IdentityFrom(r.Context())
			st.loggedIn = true
		} else if c, err := r.Cookie(sessionCookie); err == nil {
			if sess, key, ok := s.decode(c.Value); ok {
				st.loggedIn, st.binding = true, sess.ID
				st.identity = Identity{KeyID: key.ID, ReadOnly: key.ReadOnly}
			}
		}
		if st.binding == "" {
			if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 && len(c.Value) <= 64 {
				st.binding = c.Value
			} else {
				st.binding = randomToken()
				http.SetCookie(w, s.cookie(r, csrfCookie, st.binding, 0))
			}
		}
		ctx := context.WithValue(r.Context(), dashStateKey{}, st)
		if st.identity.KeyID != "" {
			ctx = WithIdentity(ctx, st.identity)
		}
		r = r.WithContext(ctx)
		if !st.loggedIn && !publicPath(r.URL.Path) {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, basePath(r)+"/login", http.StatusSeeOther)
				return
			}
			h.dashError(w, r, http.StatusUnauthorized, "Log in first.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hmacEqual compares two secrets in constant time (for their length).
func hmacEqual(a, b []byte) bool { return hmac.Equal(a, b) }
