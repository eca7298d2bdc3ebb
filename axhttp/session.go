package axhttp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/axsched/ax/store"
)

// The dashboard's sessions and CSRF tokens.
//
// With Config.Auth, the dashboard asks for a login: a key ID and its
// secret, checked in constant time like a signature. A good login sets
// the session cookie ax_session: base64url(JSON{key ID, login time,
// absolute expiry, last-seen time, random session ID, fingerprint of the
// key's secret}) "." base64url(HMAC-SHA256(SessionKey, that JSON)). It is
// HttpOnly, SameSite=Strict, scoped to the mount point, and Secure over
// TLS (or with Config.SecureCookies). Each request re-reads the key: a
// key removed from Auth, or whose secret changed, ends its sessions, and
// a read-only key gets the read-only dashboard.
//
// A session ends at the first of: its absolute expiry (Config.SessionTTL
// after the login), Config.SessionIdleTimeout without a request (the
// cookie's last-seen time is renewed as the session is used, at most once
// a minute), a logout, or a revocation of all its key's sessions
// (RevokeSessions). The last two are server-side: a logout records the
// session's ID, and RevokeSessions the key and the time, in
// Config.Revocations (the store, when it is a store.RevocationKeeper),
// until no cookie they cover can be valid anyway; every request looks its
// session's two names up there, so a copied cookie stops working on every
// server on the store at once.
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
	key     []byte
	ttl     time.Duration
	idle    time.Duration // 0: no idle timeout
	auth    *Auth
	now     func() time.Time
	secure  bool
	revoked store.RevocationKeeper
}

// session is the content of a session cookie.
type session struct {
	KeyID string `json:"k"`
	// Issued is the login time, in Unix microseconds: RevokeSessions
	// ends the sessions issued at or before its time.
	Issued int64 `json:"i"`
	// Expires is the absolute expiry, in Unix seconds.
	Expires int64 `json:"e"`
	// Seen is when the cookie was last renewed, in Unix seconds: the
	// idle timeout runs from it.
	Seen        int64  `json:"s"`
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
// has not expired nor been idle too long, and whose key still exists with
// the same secret. Revocations are checked apart (revokedSession).
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
	now := s.now().Unix()
	if json.Unmarshal(b, &sess) != nil || now >= sess.Expires || sess.ID == "" {
		return session{}, Key{}, false
	}
	if s.idle > 0 && now-sess.Seen >= int64(s.idle/time.Second) {
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
	now := s.now()
	sess := session{KeyID: key.ID, Issued: now.UnixMicro(), Expires: now.Add(s.ttl).Unix(), Seen: now.Unix(),
		ID: randomToken(), Fingerprint: fingerprint(key.Secret)}
	s.setCookie(w, r, sess)
}

// setCookie writes sess's cookie, living until the session's absolute
// expiry.
func (s *sessions) setCookie(w http.ResponseWriter, r *http.Request, sess session) {
	http.SetCookie(w, s.cookie(r, sessionCookie, s.encode(sess), int(max(sess.Expires-s.now().Unix(), 1))))
}

// renewEvery is how often a session in use has its cookie renewed (its
// last-seen time moved on): often enough for the idle timeout, seldom
// enough not to set a cookie on every request.
func (s *sessions) renewEvery() time.Duration {
	return min(time.Minute, s.idle/10)
}

// logout ends the request's session on w: it is revoked for every server
// on the store until its absolute expiry, and its cookie deleted. It
// fails only when the revocation cannot be recorded (the cookie is then
// kept, so that the operator sees the session still open).
func (s *sessions) logout(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if sess, _, ok := s.decode(c.Value); ok {
			if err := s.revoked.Revoke(r.Context(), sessionRevocation(sess.ID), time.Unix(sess.Expires, 0)); err != nil {
				return fmt.Errorf("revoke session: %w", err)
			}
		}
	}
	http.SetCookie(w, s.cookie(r, sessionCookie, "", -1))
	return nil
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
				// The static assets are public: their requests skip the
				// store (a page loads several) and renew nothing, and count
				// against the cookie's key, revoked or not.
				static := strings.HasPrefix(r.URL.Path, "/static/")
				// A page's own refresh (app.js) is not the operator
				// using it: it renews nothing, so a dashboard left open
				// still ends at the idle timeout.
				refresh := r.Header.Get(refreshHeader) != ""
				revoked, err := false, error(nil)
				if !static {
					revoked, err = s.revokedSession(r.Context(), sess)
				}
				if err != nil {
					logFrom(r.Context()).Error("dashboard: cannot look up session revocations", zapError(err))
					h.dashError(w, r, http.StatusServiceUnavailable, "The session cannot be checked now: try again in a moment.")
					return
				}
				if revoked {
					http.SetCookie(w, s.cookie(r, sessionCookie, "", -1))
				} else {
					st.loggedIn, st.binding = true, sess.ID
					st.identity = Identity{KeyID: key.ID, ReadOnly: key.ReadOnly}
					if now := s.now(); !static && !refresh && s.idle > 0 && now.Sub(time.Unix(sess.Seen, 0)) >= s.renewEvery() {
						sess.Seen = now.Unix()
						s.setCookie(w, r, sess)
					}
				}
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
		if spent := budgetSpent(r); spent > 0 && !st.loggedIn {
			// An address without failure budget is served only with a
			// valid session: no login attempt, no public page.
			refuseSpent(w, r, spent)
			return
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

// refreshHeader marks the requests app.js makes to refresh a page.
const refreshHeader = "X-AX-Refresh"

// hmacEqual compares two secrets in constant time (for their length).
func hmacEqual(a, b []byte) bool { return hmac.Equal(a, b) }
