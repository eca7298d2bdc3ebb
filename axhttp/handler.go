package axhttp

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// APIPrefix is where the JSON API is served, below the handler's mount
// point.
const APIPrefix = "/api/v1"

// OpenAPIPath is where the OpenAPI 3 document of the API is served, below
// the handler's mount point.
const OpenAPIPath = APIPrefix + "/openapi.json"

// Config configures New.
type Config struct {
	// Scheduler schedules the jobs submitted through the API, and its
	// Admin serves the rest. Either Scheduler, Admin or Store is
	// required; without a Scheduler, submitting answers 501.
	Scheduler *ax.Scheduler

	// Admin serves the operator routes when there is no Scheduler (a
	// process that runs no jobs). Defaults to the Scheduler's Admin, or
	// to an Admin on Store.
	Admin *ax.Admin

	// Store is the cluster's store, for what the Admin does not tell:
	// the callback deliveries of a job (store.FollowUpStore). Defaults to
	// the Scheduler's store.
	Store store.Store

	// Auth verifies the API's signed requests and the dashboard's logins
	// (a key ID and its secret open a session). When nil, the handler
	// trusts every request: put your own authentication in front of it,
	// and tell the handler who the caller is with WithIdentity (a
	// read-only identity gets the read-only dashboard and API).
	Auth *Auth

	// Logger receives one line per request, with its request ID, and the
	// internal errors that the responses do not tell. Defaults to a no-op
	// logger.
	Logger *zap.Logger

	// MaxBodyBytes bounds request bodies. Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// RateLimit bounds each key's requests (the zero value: no limit).
	// Requests without an identity share one bucket. A signed request
	// over its key's limit gets 429 before its nonce is recorded, so it
	// can be sent again once Retry-After has passed.
	RateLimit RateLimit

	// ClientRateLimit bounds each client address's requests, API and
	// dashboard, before anything else is done with them (the zero value:
	// no limit). ax serve sets one by default.
	ClientRateLimit RateLimit

	// FailureLimit bounds each client address's failed authentications:
	// requests refused with 401 (missing, expired, reused or wrong
	// signatures, unknown keys), signed requests whose body was over
	// MaxBodyBytes, and failed dashboard logins each take a token. Until
	// the bucket refills, an address without one left gets 429 for
	// whatever cannot prove itself without its body being read (a
	// request with a body, one without a valid signature, a login, a
	// page without a session), while a signed request without a body
	// whose signature is right and a valid dashboard session are
	// served: clients sharing an address (behind a proxy not in
	// TrustedProxies) are not locked out by one of them (the zero value:
	// no limit). ax serve sets one by default.
	FailureLimit RateLimit

	// TrustedProxies are the addresses of the reverse proxies in front
	// of the handler. A request from one of them is counted (client and
	// failure limits, the login throttle, logs) against the address its
	// X-Forwarded-For names: the rightmost one not itself a trusted proxy.
	// Other requests' X-Forwarded-For is ignored, so a client cannot
	// choose its own address. Without trusted proxies every request is
	// counted against RemoteAddr: behind a proxy, all clients would share
	// the proxy's buckets. IPv6 clients are counted by their /64.
	TrustedProxies []netip.Prefix

	// CallbackPolicy, when set, lets submitted jobs carry a callback_url
	// (see Callbacks); it must be the policy of the hosts that deliver
	// callbacks (RegisterCallbacks). When nil, a callback_url is refused
	// with 400.
	CallbackPolicy *CallbackPolicy

	// Activity feeds the dashboard's throughput and start-lag charts.
	// Add it to the Scheduler's Config.Observers too; when nil the charts
	// are left out.
	Activity *Activity

	// ReadOnly serves only reads, whoever asks: the API refuses changes
	// with 403 and the dashboard shows no buttons.
	ReadOnly bool

	// SessionKey signs the dashboard's session cookies and CSRF tokens:
	// 32 bytes or more of randomness. Defaults to a random key made by
	// New, so sessions end when the process does and are not shared with
	// other servers: give the same key to every server behind one
	// address.
	SessionKey []byte

	// SessionTTL is how long a dashboard login lasts at most. Defaults
	// to DefaultSessionTTL (8h); at most MaxSessionTTL.
	SessionTTL time.Duration

	// SessionIdleTimeout ends a dashboard session after this long
	// without a request. Defaults to DefaultSessionIdleTimeout (30m);
	// negative: no idle timeout.
	SessionIdleTimeout time.Duration

	// Revocations records logouts and RevokeSessions, so that a session
	// ended on one server is refused by every server that shares it.
	// Defaults to Store when it implements store.RevocationKeeper
	// (pgstore, sqlitestore, memstore do), otherwise to revocations kept
	// in this process's memory (a logout then holds on this server
	// only).
	Revocations store.RevocationKeeper

	// SecureCookies marks the dashboard's cookies Secure even when the
	// request came without TLS (behind a proxy that terminates TLS).
	// Cookies of requests that came over TLS are always Secure.
	SecureCookies bool

	// RefreshInterval is how often an open dashboard page refreshes its
	// content (app.js fetches the page again; a refresh does not count
	// as activity for the idle timeout, and waits while the operator
	// types or has ticked a box). Defaults to DefaultRefreshInterval;
	// negative: pages do not refresh.
	RefreshInterval time.Duration

	// Clock is the host clock (session expiry, chart minutes). Defaults
	// to time.Now.
	Clock func() time.Time
}

// DefaultRefreshInterval is how often dashboard pages refresh by
// default.
const DefaultRefreshInterval = 10 * time.Second

// ErrInvalidConfig is returned by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("axhttp: invalid config")

// Handler serves the API and the dashboard; see New.
type Handler struct {
	cfg      Config
	admin    *ax.Admin
	roAdmin  *ax.Admin // admin for read-only callers: secret metadata stays sealed (reader)
	store    store.Store
	log      *zap.Logger
	limits   *keyLimiters // per key (or identity)
	clients  *keyLimiters // per client address, every request
	failures *keyLimiters // per client address, failed authentications
	login    *keyLimiters // per client address, dashboard logins
	sessions *sessions
	pages    *pages
	root     http.Handler
	apiRoute []string
}

// New returns the handler of the JSON API (below APIPrefix) and the
// dashboard (everything else), to mount under any prefix:
//
//	mux.Handle("/ax/", http.StripPrefix("/ax", h))
//
// Every request gets a request ID (logged, echoed in X-Request-ID), a
// body limit and, once its caller is known, the caller's rate limit.
// With cfg.Auth, API requests must be signed and the dashboard asks for
// a login; without it, authentication is the user's (see Config.Auth).
// It returns an error wrapping ErrInvalidConfig for a Config it cannot
// use.
func New(cfg Config) (*Handler, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case cfg.RefreshInterval == 0:
		cfg.RefreshInterval = DefaultRefreshInterval
	case cfg.RefreshInterval < 0:
		cfg.RefreshInterval = 0
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionTTL > MaxSessionTTL {
		return nil, fmt.Errorf("%w: SessionTTL over %s", ErrInvalidConfig, MaxSessionTTL)
	}
	switch {
	case cfg.SessionIdleTimeout == 0:
		cfg.SessionIdleTimeout = DefaultSessionIdleTimeout
	case cfg.SessionIdleTimeout < 0:
		cfg.SessionIdleTimeout = 0
	}
	if cfg.Store == nil && cfg.Scheduler != nil {
		cfg.Store = cfg.Scheduler.Store()
	}
	admin := cfg.Admin
	switch {
	case admin != nil:
	case cfg.Scheduler != nil:
		admin = cfg.Scheduler.Admin()
	case cfg.Store != nil:
		a, err := ax.NewAdmin(ax.AdminConfig{Store: cfg.Store, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		admin = a
	default:
		return nil, fmt.Errorf("%w: give a Scheduler, an Admin or a Store", ErrInvalidConfig)
	}
	if cfg.SessionKey == nil {
		cfg.SessionKey = make([]byte, 32)
		if _, err := rand.Read(cfg.SessionKey); err != nil {
			return nil, fmt.Errorf("axhttp: session key: %w", err)
		}
	}
	if len(cfg.SessionKey) < MinSecretLength {
		return nil, fmt.Errorf("%w: SessionKey shorter than %d bytes", ErrInvalidConfig, MinSecretLength)
	}
	if cfg.CallbackPolicy != nil {
		p := *cfg.CallbackPolicy
		cfg.CallbackPolicy = &p
	}
	if cfg.Revocations == nil {
		cfg.Revocations, _ = revocationsFor(cfg.Store, cfg.Clock)
	}
	cfg.TrustedProxies = slices.Clone(cfg.TrustedProxies)
	h := &Handler{
		cfg: cfg, admin: admin, roAdmin: admin.WithSecretMetadataSealed(), store: cfg.Store, log: cfg.Logger,
		limits:   newKeyLimiters(cfg.RateLimit),
		clients:  newKeyLimiters(cfg.ClientRateLimit),
		failures: newKeyLimiters(cfg.FailureLimit),
		login:    newKeyLimiters(RateLimit{PerSecond: 1, Burst: 10}),
		sessions: &sessions{key: cfg.SessionKey, ttl: cfg.SessionTTL, idle: cfg.SessionIdleTimeout, auth: cfg.Auth,
			now: cfg.Clock, secure: cfg.SecureCookies, revoked: cfg.Revocations},
	}
	pg, err := loadPages()
	if err != nil {
		return nil, err
	}
	h.pages = pg
	h.root = h.routes()
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.root.ServeHTTP(w, r) }

// routes builds the handler's mux and its middleware, outermost first:
// request ID and log line, the client address's limits (every request,
// and failed authentications), the browser cross-origin check, body
// limit, then per area the caller's authentication (signatures for the
// API, the session for the dashboard) and the key's rate limit (for
// signed requests, between the signature and the nonce).
func (h *Handler) routes() http.Handler {
	api := http.NewServeMux()
	for _, rt := range h.apiRoutes() {
		api.HandleFunc(rt.pattern, rt.handle)
		h.apiRoute = append(h.apiRoute, rt.pattern)
	}
	var apiH http.Handler = h.readOnlyAPI(notFoundOrMethod(api))
	if h.cfg.Auth != nil {
		apiH = h.cfg.Auth.handler(apiH, authHooks{failed: h.authFailed, admit: h.admitKey})
	} else {
		apiH = withRateLimit(h.limits, apiH)
	}

	dash := h.dashboardMux()
	dashH := h.sessions.middleware(h, withRateLimit(h.limits, dash))

	mux := http.NewServeMux()
	mux.Handle(APIPrefix+"/", apiH)
	mux.Handle("/", dashH)

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem(http.StatusForbidden, ProblemForbidden, "cross-origin request refused"))
	}))
	return withHSTS(withRequestID(h.log, withClient(h.cfg.TrustedProxies, withBase(
		h.clientLimits(cop.Handler(withBodyLimit(h.cfg.MaxBodyBytes, mux)))))))
}

// readOnlyAPI refuses changes when the handler or the caller is
// read-only (Auth refuses read-only keys itself; this covers ReadOnly and
// identities set by the user's own middleware).
func (h *Handler) readOnlyAPI(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && h.readOnly(r) {
			writeProblem(w, r, problem(http.StatusForbidden, ProblemForbidden, "this key may only read"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// reader returns the Admin that reads jobs for r's caller: a read-only
// caller sees the values given with ax.SecretMetadata sealed (shown as
// encrypted) even when the server holds the key ring; payloads and
// results open for every caller, as before.
func (h *Handler) reader(r *http.Request) *ax.Admin {
	if h.readOnly(r) {
		return h.roAdmin
	}
	return h.admin
}

// readOnly reports whether r may only read.
func (h *Handler) readOnly(r *http.Request) bool {
	if h.cfg.ReadOnly {
		return true
	}
	id, _ := IdentityFrom(r.Context())
	return id.ReadOnly
}

// APIRoutes lists the API's routes as ServeMux patterns ("GET
// /api/v1/jobs/{id}"), relative to the mount point.
func (h *Handler) APIRoutes() []string { return slices.Clone(h.apiRoute) }

type baseKey struct{}

// withBase records the path the handler is mounted under: the part of
// the path the client sent (RequestURI) that a StripPrefix in front took
// off, so that links and cookies point below the mount point.
func withBase(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := ""
		if r.RequestURI != "" {
			if u, err := url.ParseRequestURI(r.RequestURI); err == nil && strings.HasSuffix(u.Path, r.URL.Path) {
				base = strings.TrimSuffix(u.Path, r.URL.Path)
			}
			if strings.HasPrefix(base, "//") || strings.ContainsAny(base, "\\\x00") {
				base = "" // never a scheme-relative URL in a link or a redirect
			}
		}
		if ri := infoFrom(r.Context()); ri != nil {
			ri.base = base
		}
		next.ServeHTTP(w, r)
	})
}

// basePath is the mount point of the handler for r ("" at the root).
func basePath(r *http.Request) string {
	if ri := infoFrom(r.Context()); ri != nil {
		return ri.base
	}
	return ""
}
