package axhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestClientAddr: the client address is RemoteAddr's, unless RemoteAddr
// is a trusted proxy: then the rightmost X-Forwarded-For entry that is
// not a trusted proxy; entries a client could have written are never
// believed. IPv6 clients count by /64.
func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, c := range []struct {
		name   string
		remote string
		xff    []string
		want   string
	}{
		{"direct", "203.0.113.7:4242", nil, "203.0.113.7"},
		{"direct, forwarded-for ignored", "203.0.113.7:4242", []string{"198.51.100.1"}, "203.0.113.7"},
		{"through a trusted proxy", "10.1.2.3:4242", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a spoofed entry left of the real one", "10.1.2.3:4242", []string{"192.0.2.66, 198.51.100.1"}, "198.51.100.1"},
		{"two trusted proxies", "10.1.2.3:4242", []string{"198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"several header lines", "10.1.2.3:4242", []string{"192.0.2.66", "198.51.100.1"}, "198.51.100.1"},
		{"an entry with a port", "10.1.2.3:4242", []string{"198.51.100.1:5555"}, "198.51.100.1"},
		{"garbage stops the walk at the proxy", "10.1.2.3:4242", []string{"198.51.100.1, nonsense"}, "10.1.2.3"},
		{"a trusted proxy without forwarded-for", "10.1.2.3:4242", nil, "10.1.2.3"},
		{"only trusted entries", "10.1.2.3:4242", []string{"10.4.4.4"}, "10.4.4.4"},
		{"IPv6 by /64", "[2001:db8:1:2:3:4:5:6]:4242", nil, "2001:db8:1:2::/64"},
		{"IPv6 proxy, IPv4 client", "[::1]:4242", []string{"198.51.100.1"}, "198.51.100.1"},
		{"IPv4-mapped", "[::ffff:203.0.113.7]:4242", nil, "203.0.113.7"},
		{"not an address", "@unix", nil, "@unix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			require.Equal(t, c.want, clientAddr(r, trusted))
		})
	}
}

// requireRateLimited checks a 429 problem with a Retry-After of whole
// seconds.
func requireRateLimited(t *testing.T, res *http.Response, body []byte) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "%s", body)
	require.Contains(t, string(body), `"type":"`+ProblemRateLimited+`"`)
	secs, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
	require.Positive(t, secs)
}

// TestFailureLimit: each kind of failed authentication from one address
// spends its failure budget; once spent, every request from the address
// that cannot prove itself without its body being read gets 429 with
// Retry-After, a well-signed POST included, whose nonce is then not
// recorded (it can be sent again later), and nothing changes in
// the store. Successful requests spend nothing. (Issue 25 defect 3: bad
// signatures and unknown keys were never counted.)
func TestFailureLimit(t *testing.T) {
	limit := RateLimit{PerSecond: 0.001, Burst: 3}
	for _, c := range []struct {
		name string
		fail func(f *fixture) int // one failed attempt; its status
		want int
	}{
		{"no signature", func(f *fixture) int {
			res, _ := f.call(nil, http.MethodGet, APIPrefix+"/jobs", "")
			return res.StatusCode
		}, http.StatusUnauthorized},
		{"unknown key", func(f *fixture) int {
			res, _ := f.call(&Signer{KeyID: "ghost", Secret: testSecret}, http.MethodGet, APIPrefix+"/jobs", "")
			return res.StatusCode
		}, http.StatusUnauthorized},
		{"wrong secret", func(f *fixture) int {
			res, _ := f.call(&Signer{KeyID: "app", Secret: otherSecret}, http.MethodPost, APIPrefix+"/jobs", `{"kind":"email"}`)
			return res.StatusCode
		}, http.StatusUnauthorized},
		{"reused nonce", func(f *fixture) int {
			req, err := http.NewRequest(http.MethodGet, f.base+APIPrefix+"/jobs", nil)
			require.NoError(t, err)
			require.NoError(t, f.app.Sign(req))
			res, err := http.DefaultClient.Do(req.Clone(t.Context()))
			require.NoError(t, err)
			res.Body.Close()
			res, err = http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			return res.StatusCode
		}, http.StatusUnauthorized},
		{"oversized chunked body", func(f *fixture) int {
			// io.MultiReader hides the length: the body goes chunked, so
			// it is refused only once read, before its signature.
			req, err := http.NewRequest(http.MethodPost, f.base+APIPrefix+"/jobs", io.MultiReader(strings.NewReader(strings.Repeat("x", 4<<10))))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			require.NoError(t, f.app.Sign(req))
			req.ContentLength = 0
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			return res.StatusCode
		}, http.StatusRequestEntityTooLarge},
		{"failed login", func(f *fixture) int {
			b := f.browser()
			tok := b.csrf("/login")
			res, _ := b.post("/login", url.Values{"csrf": {tok}, "key_id": {"app"}, "secret": {string(otherSecret)}})
			return res.StatusCode
		}, http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{cfg: func(cf *Config) { cf.FailureLimit, cf.MaxBodyBytes = limit, 1<<10 }})
			for range 5 {
				res, body := f.call(&f.app, http.MethodGet, APIPrefix+"/jobs", "")
				require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
			}
			for i := range limit.Burst {
				require.Equal(t, c.want, c.fail(f), "failure %d", i+1)
			}
			res, body := f.call(nil, http.MethodGet, APIPrefix+"/jobs", "")
			requireRateLimited(t, res, body)

			before, err := f.st.(store.Counter).CountJobs(t.Context())
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodPost, f.base+APIPrefix+"/jobs", strings.NewReader(`{"kind":"email"}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			require.NoError(t, f.app.Sign(req))
			res, err = http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ = io.ReadAll(res.Body)
			res.Body.Close()
			requireRateLimited(t, res, body)
			after, err := f.st.(store.Counter).CountJobs(t.Context())
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused request stored a job")
			fresh, err := f.st.(store.NonceKeeper).RememberNonce(t.Context(), "app:"+req.Header.Get(HeaderNonce), time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.True(t, fresh, "the nonce of a request refused by the failure limit was recorded")

			b := f.browser()
			res2, _ := b.get("/login")
			require.Equal(t, http.StatusTooManyRequests, res2.StatusCode, "the dashboard from the same address")
		})
	}
}

// TestKeyRateLimitKeepsNonce: a signed request over its key's rate limit
// gets 429 and its nonce is not recorded, so the same request can be sent
// again once Retry-After has passed. (Issue 25 defect 3: the nonce was
// taken before the rate check.)
func TestKeyRateLimitKeepsNonce(t *testing.T) {
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.RateLimit = RateLimit{PerSecond: 0.001, Burst: 1} }})
	res, body := f.call(&f.app, http.MethodGet, APIPrefix+"/jobs", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	req, err := http.NewRequest(http.MethodGet, f.base+APIPrefix+"/jobs", nil)
	require.NoError(t, err)
	require.NoError(t, f.app.Sign(req))
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	requireRateLimited(t, res, body)
	fresh, err := f.st.(store.NonceKeeper).RememberNonce(t.Context(), "app:"+req.Header.Get(HeaderNonce), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, fresh, "the nonce of a rate-limited request was recorded")
}

// TestClientRateLimit: ClientRateLimit bounds every request of an
// address, signed or not, API or dashboard, with 429 and Retry-After.
func TestClientRateLimit(t *testing.T) {
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.ClientRateLimit = RateLimit{PerSecond: 0.001, Burst: 3} }})
	res, body := f.call(&f.app, http.MethodGet, APIPrefix+"/jobs", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	res, body = f.call(nil, http.MethodGet, APIPrefix+"/jobs", "")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%s", body)
	res, body = f.call(nil, http.MethodGet, "/login", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	for _, path := range []string{APIPrefix + "/jobs", "/login"} {
		res, body = f.call(nil, http.MethodGet, path, "")
		requireRateLimited(t, res, body)
	}
	res, body = f.call(&f.app, http.MethodGet, APIPrefix+"/jobs", "")
	requireRateLimited(t, res, body)
}

// TestTrustedProxy: behind a trusted proxy, the failure limit and the
// login throttle count each client by X-Forwarded-For, so one attacker
// does not lock every operator out; from an untrusted address the header
// is ignored, so an attacker cannot dodge the limit by writing it.
// (Issue 25 defect 6: the login throttle keyed on RemoteAddr.)
func TestTrustedProxy(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	login := func(f *fixture, xff string) int {
		b := f.browser()
		tok := b.csrf("/login")
		req, err := http.NewRequest(http.MethodPost, f.base+"/login",
			strings.NewReader(url.Values{"csrf": {tok}, "key_id": {"app"}, "secret": {string(otherSecret)}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", xff)
		res, err := b.client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	unsigned := func(f *fixture, xff string) int {
		res, _ := f.call(nil, http.MethodGet, APIPrefix+"/jobs", "", "X-Forwarded-For", xff)
		return res.StatusCode
	}
	for _, c := range []struct {
		name      string
		trusted   []netip.Prefix
		failures  RateLimit
		attempt   func(f *fixture, xff string) int
		attempts  int // the attacker's, all refused with 401 or 429
		otherGets int // what another client's attempt gets next
		spoofGets int // what the attacker gets, prepending another address
	}{
		{"failure limit behind a trusted proxy", loopback, RateLimit{PerSecond: 0.001, Burst: 3}, unsigned, 3, 401, 429},
		{"failure limit, forwarded-for from a client", nil, RateLimit{PerSecond: 0.001, Burst: 3}, unsigned, 3, 429, 429},
		{"login throttle behind a trusted proxy", loopback, RateLimit{}, login, 10, 401, 429},
		{"login throttle, forwarded-for from a client", nil, RateLimit{}, login, 10, 429, 429},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{cfg: func(cf *Config) { cf.TrustedProxies, cf.FailureLimit = c.trusted, c.failures }})
			for range c.attempts {
				require.Equal(t, http.StatusUnauthorized, c.attempt(f, "198.51.100.66"))
			}
			require.Equal(t, http.StatusTooManyRequests, c.attempt(f, "198.51.100.66"), "the attacker")
			require.Equal(t, c.spoofGets, c.attempt(f, "198.51.100.7, 198.51.100.66"), "the attacker, spoofing")
			require.Equal(t, c.otherGets, c.attempt(f, "198.51.100.7"), "another client")
		})
	}
}

// countingBody counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func (c *countingBody) Close() error { return nil }

// TestBadSignatureBodyUnread: a request that its headers already condemn
// (an unknown key, a timestamp outside the window, a malformed
// signature), or that comes from an address without failure budget, is
// refused without its body being read or hashed. (Issue 25 defect 3: up
// to 4 MiB were read and hashed before a signature was refused.)
func TestBadSignatureBodyUnread(t *testing.T) {
	// The first three cases spend the budget; the fourth finds it spent.
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.FailureLimit = RateLimit{PerSecond: 0.001, Burst: 3} }})
	big := strings.Repeat("x", 1<<20)
	send := func(s Signer, edit func(r *http.Request)) (int, int) {
		req := httptest.NewRequest(http.MethodPost, APIPrefix+"/jobs", strings.NewReader(big))
		req.Header.Set("Content-Type", "application/json")
		require.NoError(t, s.Sign(req))
		if edit != nil {
			edit(req)
		}
		body := &countingBody{r: strings.NewReader(big)}
		req.Body = body
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		return rec.Code, body.read
	}
	old := func() time.Time { return time.Now().Add(-time.Hour) }
	for _, c := range []struct {
		name   string
		signer Signer
		edit   func(r *http.Request)
		status int
	}{
		{"unknown key", Signer{KeyID: "ghost", Secret: testSecret}, nil, 401},
		{"timestamp outside the window", Signer{KeyID: "app", Secret: testSecret, Clock: old}, nil, 401},
		{"malformed signature", f.app, func(r *http.Request) { r.Header.Set(HeaderSignature, "00") }, 401},
		{"wrong signature, budget spent", f.app, func(r *http.Request) { r.Header.Set(HeaderSignature, strings.Repeat("0", 64)) }, 429},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, read := send(c.signer, c.edit)
			require.Equal(t, c.status, status)
			require.Zero(t, read, "bytes of the body read")
		})
	}
}

// TestFailureBudgetSpentKeepsProvenClients: one client spending its
// address's failure budget (behind a proxy not in TrustedProxies, every
// client shares the proxy's address) does not lock the others out: a
// signed request without a body whose signature is right and a dashboard
// session are still served, while whatever cannot prove itself without
// its body being read (a signed POST, an unsigned request, a login, a
// public page) gets 429. (Issue 41: one bad signature a second made every
// page and API call from the address 429 for everyone.)
func TestFailureBudgetSpentKeepsProvenClients(t *testing.T) {
	f := newFixture(t, fixtureOptions{cfg: func(cf *Config) { cf.FailureLimit = RateLimit{PerSecond: 0.001, Burst: 3} }})
	operator := f.browser()
	operator.login("app", testSecret)
	for range 3 {
		res, body := f.call(&Signer{KeyID: "app", Secret: otherSecret}, http.MethodGet, APIPrefix+"/jobs", "")
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%s", body)
	}
	res, body := f.call(&Signer{KeyID: "app", Secret: otherSecret}, http.MethodGet, APIPrefix+"/jobs", "")
	requireRateLimited(t, res, body)

	res, body = f.call(&f.app, http.MethodGet, APIPrefix+"/jobs", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "a well-signed read from the same address: %s", body)
	res, page := operator.get("/dead")
	require.Equal(t, http.StatusOK, res.StatusCode, "a logged-in operator at the same address: %s", page)

	res, body = f.call(&f.app, http.MethodPost, APIPrefix+"/jobs", `{"kind":"email"}`)
	requireRateLimited(t, res, body)
	res, body = f.call(nil, http.MethodGet, APIPrefix+"/jobs", "")
	requireRateLimited(t, res, body)
	res, _ = f.browser().get("/login")
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "a new visitor's login page")
}
