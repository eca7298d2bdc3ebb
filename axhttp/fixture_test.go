package axhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// fixture is an API and dashboard server on a memstore Scheduler, mounted
// under /ax, with a read-write key (app), a read-only key (dash) and the
// handler's Activity.
type fixture struct {
	t        *testing.T
	st       store.Store
	s        *ax.Scheduler
	h        *Handler
	srv      *httptest.Server
	base     string // srv.URL + "/ax"
	app      Signer
	reader   Signer
	activity *Activity
}

// fixtureOptions adjust a fixture.
type fixtureOptions struct {
	store    store.Store
	start    bool                            // start the Scheduler (jobs run)
	noAuth   bool                            // no Auth: the handler trusts every request
	setup    func(s *ax.Scheduler)           // register handlers and schedules before Start
	schedCfg func(c *ax.Config)              // adjust the Scheduler's config
	cfg      func(c *Config)                 // adjust the handler's config
	front    func(http.Handler) http.Handler // middleware in front of the handler
}

func newFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{t: t, st: o.store, activity: NewActivity(nil),
		app: Signer{KeyID: "app", Secret: testSecret}, reader: Signer{KeyID: "dash", Secret: readerSecret}}
	if f.st == nil {
		f.st = memstore.New()
	}
	sc := ax.Config{Store: f.st, Logger: zap.NewNop(), Observers: []ax.Observer{f.activity},
		HeartbeatInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond}
	if o.schedCfg != nil {
		o.schedCfg(&sc)
	}
	s, err := ax.New(sc)
	require.NoError(t, err)
	f.s = s
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	if o.setup != nil {
		o.setup(s)
	}
	if o.start {
		require.NoError(t, s.Start(t.Context()))
	}
	nonces, _ := NoncesFor(f.st)
	cfg := Config{Scheduler: s, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Activity: f.activity,
		CallbackPolicy: &CallbackPolicy{AllowPrivate: true}}
	if !o.noAuth {
		auth, err := NewAuth(AuthConfig{Keys: []Key{{ID: "app", Secret: testSecret}, {ID: "dash", Secret: readerSecret, ReadOnly: true}}, Nonces: nonces})
		require.NoError(t, err)
		cfg.Auth = auth
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	h, err := New(cfg)
	require.NoError(t, err)
	f.h = h
	var inner http.Handler = http.StripPrefix("/ax", h)
	if o.front != nil {
		inner = o.front(inner)
	}
	mux := http.NewServeMux()
	mux.Handle("/ax/", inner)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	f.base = f.srv.URL + "/ax"
	return f
}

// call sends a request to the API (path below /ax), signed by s unless s
// is nil, and returns the status and body.
func (f *fixture) call(s *Signer, method, path, body string, hdr ...string) (*http.Response, []byte) {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.base+path, rd)
	require.NoError(f.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if s != nil {
		require.NoError(f.t, s.Sign(req))
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(f.t, err)
	return res, b
}

// browser is a cookie-keeping HTTP client that does not follow
// redirects, acting as a person's browser on the dashboard.
type browser struct {
	f      *fixture
	client *http.Client
}

func (f *fixture) browser() *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(f.t, err)
	return &browser{f: f, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (b *browser) get(path string) (*http.Response, string) {
	b.f.t.Helper()
	res, err := b.client.Get(b.f.base + path)
	require.NoError(b.f.t, err)
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	b.f.t.Helper()
	res, err := b.client.PostForm(b.f.base+path, form)
	require.NoError(b.f.t, err)
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the page at path.
func (b *browser) csrf(path string) string {
	b.f.t.Helper()
	_, body := b.get(path)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(b.f.t, m, "no CSRF token on %s", path)
	return m[1]
}

// login logs the browser in with key ID and secret.
func (b *browser) login(keyID string, secret []byte) {
	b.f.t.Helper()
	tok := b.csrf("/login")
	res, body := b.post("/login", url.Values{"csrf": {tok}, "key_id": {keyID}, "secret": {string(secret)}})
	require.Equal(b.f.t, http.StatusSeeOther, res.StatusCode, body)
}
