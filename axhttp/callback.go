package axhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Completion callbacks. A job scheduled with the Callback option carries a
// follow-up: when it reaches a final state (succeeded, dead, cancelled) the
// store inserts, in the same atomic operation, a job of kind CallbackKind
// that POSTs a signed JSON description of the job to the URL. Delivery is
// an AX job like any other: it survives restarts, runs on any host with
// RegisterCallbacks, is retried with CallbackBackoff, and when it exhausts
// its attempts it is a dead job of its own, found from the original with
// the store's follow-ups.

// CallbackKind is the job kind of callback deliveries.
const CallbackKind = "ax.callback"

// CallbackBackoff is the delay after each failed delivery: 5s, 30s, 2m,
// 10m, 30m, then every hour (no jitter below a minute would help: one
// receiver's callbacks are few).
var CallbackBackoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour}

// DefaultCallbackAttempts is how many deliveries a callback gets: about
// nine hours of tries with CallbackBackoff.
const DefaultCallbackAttempts = 12

// callbackPayload is a callback job's payload.
type callbackPayload struct {
	URL string `json:"url"`
}

// CallbackBody is the JSON document POSTed to a callback URL.
type CallbackBody struct {
	// JobID and Kind name the job that ended.
	JobID string `json:"job_id"`
	Kind  string `json:"kind"`
	// State is its final state: succeeded, dead or cancelled.
	State ax.State `json:"state"`
	// Attempt is the number of attempts it made.
	Attempt int `json:"attempt"`
	// FinishedAt is when it ended (store clock).
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Result is what its handler recorded, if anything.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the last attempt's error, for dead and cancelled jobs.
	Error string `json:"error,omitempty"`
	// Metadata is the job's metadata.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// CallbackPolicy says where callbacks may go and how.
type CallbackPolicy struct {
	// AllowPrivate lets callbacks reach loopback, private (RFC 1918, ULA),
	// link-local, CGNAT and other non-public addresses. Off by default: a
	// callback URL comes from whoever schedules the job, and must not
	// reach the service's own network. Checked on the address actually
	// dialled, after DNS, so a name that resolves to a private address is
	// refused too.
	AllowPrivate bool
	// AllowedHosts, when not empty, lists the only hosts callbacks may go
	// to (exact names, or ".example.com" for a domain and its subdomains).
	AllowedHosts []string
	// Timeout bounds one delivery (connect, send, response headers).
	// Defaults to 10s.
	Timeout time.Duration
	// MaxResponseBytes is how much of a response body is read (and
	// discarded). Defaults to 64 KiB.
	MaxResponseBytes int64
}

// ErrCallbackURL is the error for a callback URL the policy refuses.
var ErrCallbackURL = errors.New("axhttp: callback URL not allowed")

// Check reports whether the policy allows raw as a callback URL, before
// any DNS lookup: an absolute http or https URL without user info, to an
// allowed host; a literal address must be public unless AllowPrivate.
func (p CallbackPolicy) Check(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrCallbackURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: scheme %q (want http or https)", ErrCallbackURL, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%w: no host", ErrCallbackURL)
	case u.User != nil:
		return fmt.Errorf("%w: user info in the URL", ErrCallbackURL)
	case len(raw) > 2048:
		return fmt.Errorf("%w: longer than 2048 bytes", ErrCallbackURL)
	}
	host := strings.ToLower(u.Hostname())
	if len(p.AllowedHosts) > 0 && !slices.ContainsFunc(p.AllowedHosts, func(a string) bool {
		a = strings.ToLower(a)
		if strings.HasPrefix(a, ".") {
			return host == a[1:] || strings.HasSuffix(host, a)
		}
		return host == a
	}) {
		return fmt.Errorf("%w: host %q is not in the allowed hosts", ErrCallbackURL, host)
	}
	if addr, err := netip.ParseAddr(host); err == nil && !p.AllowPrivate && !publicAddr(addr) {
		return fmt.Errorf("%w: %s is not a public address", ErrCallbackURL, addr)
	}
	return nil
}

// publicAddr reports whether a is a globally routable unicast address.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsMulticast() || a.IsUnspecified() || a.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// nonPublic lists ranges netip's predicates do not cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // CGNAT
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64 (could reach private IPv4)
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
}

// client returns an HTTP client enforcing p: timeouts, no redirects (a
// redirect could lead anywhere), and a dialer that refuses non-public
// addresses unless allowed.
func (p CallbackPolicy) client() *http.Client {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dialer := &net.Dialer{Timeout: timeout}
	if !p.AllowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrCallbackURL, err)
			}
			if !publicAddr(ap.Addr()) {
				return fmt.Errorf("%w: %s is not a public address", ErrCallbackURL, ap.Addr())
			}
			return nil
		}
	}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us and defeat the address check
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{
		Transport:     transport,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CallbackConfig configures RegisterCallbacks.
type CallbackConfig struct {
	// Signer signs each delivery (its KeyID and Secret), so receivers can
	// verify it with VerifyRequest. Required.
	Signer Signer
	// Policy says where callbacks may go.
	Policy CallbackPolicy
	// MaxAttempts is how many deliveries a callback gets. Defaults to
	// DefaultCallbackAttempts.
	MaxAttempts int
	// Concurrency caps the deliveries running at once on each host.
	// Defaults to 10.
	Concurrency int
}

// Callbacks delivers completion callbacks; see RegisterCallbacks.
type Callbacks struct {
	s      *ax.Scheduler
	cfg    CallbackConfig
	client *http.Client
}

// RegisterCallbacks registers the handler of CallbackKind on s, so this
// host delivers callbacks (register it on the hosts allowed to make
// outbound requests), and returns the Callbacks whose Option adds a
// callback to a job.
func RegisterCallbacks(s *ax.Scheduler, cfg CallbackConfig) (*Callbacks, error) {
	if cfg.Signer.KeyID == "" || len(cfg.Signer.Secret) < MinSecretLength {
		return nil, fmt.Errorf("%w: callbacks need a signer with a key ID and a secret of %d bytes or more", ErrInvalidAuthConfig, MinSecretLength)
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultCallbackAttempts
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 10
	}
	if cfg.Policy.MaxResponseBytes <= 0 {
		cfg.Policy.MaxResponseBytes = 64 << 10
	}
	c := &Callbacks{s: s, cfg: cfg, client: cfg.Policy.client()}
	err := ax.Handle(s, CallbackKind, c.deliver,
		ax.MaxAttempts(cfg.MaxAttempts), ax.Concurrency(cfg.Concurrency), ax.Timeout(2*cfg.Policy.clientTimeout()),
		ax.Retry(ax.RetryPolicyFunc(func(attempt int, _ error) time.Duration {
			return CallbackBackoff[min(attempt, len(CallbackBackoff))-1]
		})))
	if err != nil {
		return nil, fmt.Errorf("register callbacks: %w", err)
	}
	return c, nil
}

func (p CallbackPolicy) clientTimeout() time.Duration {
	if p.Timeout <= 0 {
		return 10 * time.Second
	}
	return p.Timeout
}

// Close releases the idle connections of the delivery client.
func (c *Callbacks) Close() { c.client.CloseIdleConnections() }

// Callback returns a Schedule option that has the job's end reported to
// rawURL, or an error wrapping ErrCallbackURL when the policy refuses the
// URL. The delivery is a job of its own, inserted when the job ends.
func (c *Callbacks) Callback(rawURL string) (ax.ScheduleOption, error) {
	return CallbackOption(c.cfg.Policy, rawURL)
}

// CallbackOption is Callbacks.Callback for processes that schedule jobs
// but deliver no callbacks (another host has RegisterCallbacks): policy
// must be the delivering hosts'.
func CallbackOption(policy CallbackPolicy, rawURL string) (ax.ScheduleOption, error) {
	if err := policy.Check(rawURL); err != nil {
		return nil, err
	}
	return ax.FollowUp([]ax.State{ax.StateSucceeded, ax.StateDead, ax.StateCancelled}, CallbackKind,
		callbackPayload{URL: rawURL}, ax.Metadata(map[string]string{"ax.callback": "true"})), nil
}

// deliver is the handler of CallbackKind: it POSTs the parent job's end,
// signed. Transport errors, 5xx, 408 and 429 are retried; a refused
// address, a redirect and other 4xx answers are permanent (retrying
// cannot help).
func (c *Callbacks) deliver(ctx context.Context, job *ax.Job, p callbackPayload) error {
	if job.Parent == uuid.Nil {
		return ax.Permanent(errors.New("callback job without a parent job"))
	}
	if err := c.cfg.Policy.Check(p.URL); err != nil {
		return ax.Permanent(err)
	}
	parent, err := c.s.Get(ctx, job.Parent)
	if err != nil {
		return fmt.Errorf("read job %s: %w", job.Parent, err)
	}
	body, err := json.Marshal(callbackBody(parent))
	if err != nil {
		return ax.Permanent(fmt.Errorf("encode callback: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return ax.Permanent(fmt.Errorf("callback request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ax-callbacks")
	req.Header.Set("X-AX-Job", parent.ID.String())
	req.Header.Set("X-AX-Delivery", job.ID.String()) // the same for every retry of one delivery
	if err := c.cfg.Signer.Sign(req); err != nil {
		return ax.Permanent(err)
	}
	res, err := c.client.Do(req)
	if err != nil {
		if errors.Is(err, ErrCallbackURL) {
			return ax.Permanent(err)
		}
		return fmt.Errorf("deliver callback: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, c.cfg.Policy.MaxResponseBytes))
	_ = res.Body.Close()
	switch code := res.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return fmt.Errorf("callback receiver answered %s", res.Status)
	default:
		return ax.Permanent(fmt.Errorf("callback receiver answered %s", res.Status))
	}
}

// callbackBody describes a finished job.
func callbackBody(j *store.JobRecord) CallbackBody {
	b := CallbackBody{JobID: j.ID.String(), Kind: j.Kind, State: j.State, Attempt: j.Attempt,
		FinishedAt: j.FinishedAt, Result: j.Result, Metadata: j.Metadata}
	if n := len(j.Errors); n > 0 && j.State != ax.StateSucceeded {
		b.Error = j.Errors[n-1].Error
	}
	return b
}
