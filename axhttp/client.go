package axhttp

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// The client address: what the per-address limits (Config.ClientRateLimit,
// Config.FailureLimit, the login throttle) count requests against.

// withClient records the request's client address (clientAddr) for the
// limits and the log line.
func withClient(trusted []netip.Prefix, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ri := infoFrom(r.Context()); ri != nil {
			ri.client = clientAddr(r, trusted)
		}
		next.ServeHTTP(w, r)
	})
}

// clientOf returns the client address withClient recorded for r, or its
// RemoteAddr's.
func clientOf(r *http.Request) string {
	if ri := infoFrom(r.Context()); ri != nil && ri.client != "" {
		return ri.client
	}
	return clientAddr(r, nil)
}

// clientAddr returns the address r is counted against: RemoteAddr's host,
// or, when that is a trusted proxy, the rightmost X-Forwarded-For address
// that is not (the entries left of it are whatever the client sent, so
// they are never believed). An entry that does not parse stops the walk
// at the proxy that added it. IPv6 addresses are cut to their /64, which
// one client usually holds whole.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		a, err := netip.ParseAddr(r.RemoteAddr)
		if err != nil {
			return r.RemoteAddr // not TCP (a test, a Unix socket): count it as it is
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	addr := ap.Addr().Unmap()
	if isTrusted(addr, trusted) {
		hops := forwardedFor(r.Header)
		for i := len(hops) - 1; i >= 0; i-- {
			hop, ok := parseHop(hops[i])
			if !ok {
				break
			}
			addr = hop
			if !isTrusted(hop, trusted) {
				break
			}
		}
	}
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// forwardedFor returns the X-Forwarded-For entries of h, in order, across
// all its lines.
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, line := range h.Values("X-Forwarded-For") {
		for _, e := range strings.Split(line, ",") {
			hops = append(hops, strings.TrimSpace(e))
		}
	}
	return hops
}

// parseHop parses an X-Forwarded-For entry: an address, possibly with a
// port (some proxies add one) or in brackets.
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientLimits answers 429 before anything else when the client address
// has spent its request rate (Config.ClientRateLimit). An address that has
// spent its failure budget (Config.FailureLimit) is only marked
// (budgetSpent): what it sends is then refused unless it proves itself
// cheaply, without its body being read (a valid dashboard session; a
// signed request without a body whose signature is right), so that
// clients sharing an address (behind a proxy not in TrustedProxies) are
// not locked out by one of them failing. authFailed spends the budget.
func (h *Handler) clientLimits(next http.Handler) http.Handler {
	if h.clients == nil && h.failures == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := clientOf(r)
		if ok, delay := h.clients.allow(client); !ok {
			writeRateLimited(w, r, delay, "this address's request rate is over its limit")
			return
		}
		if delay := h.failures.spent(client); delay > 0 {
			r = r.WithContext(context.WithValue(r.Context(), budgetSpentKey{}, delay))
		}
		next.ServeHTTP(w, r)
	})
}

// budgetSpentKey marks, in a request's context, that its address has no
// failure budget left: the value is how long until it has (a
// time.Duration).
type budgetSpentKey struct{}

// budgetSpent returns how long until r's address has failure budget
// again, or 0 when it has some now.
func budgetSpent(r *http.Request) time.Duration {
	d, _ := r.Context().Value(budgetSpentKey{}).(time.Duration)
	return d
}

// refuseSpent answers 429 for an address without failure budget.
func refuseSpent(w http.ResponseWriter, r *http.Request, delay time.Duration) {
	writeRateLimited(w, r, delay, "too many failed authentications from this address")
}

// authFailed spends a token of the client address's failure budget.
func (h *Handler) authFailed(r *http.Request) { h.failures.take(clientOf(r)) }

// admitKey applies the key's rate limit to a signed request, between its
// signature and its nonce.
func (h *Handler) admitKey(w http.ResponseWriter, r *http.Request, keyID string) bool {
	if ok, delay := h.limits.allow(keyID); !ok {
		writeRateLimited(w, r, delay, "this key's request rate is over its limit")
		return false
	}
	return true
}
