package axhttp

import (
	"net/http"
	"net/netip"
	"regexp"
	"slices"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// What a read-only caller does not see of a job (issue 25 defect 6): the
// lease token of a running attempt (with it, a holder's calls could be
// forged: it is the attempt's credential, not something to read), and in
// the errors of callback deliveries the network addresses the delivering
// host dialled or asked (its resolver, the private address a callback
// URL's name resolved to): they map the service's own network for
// whoever may only look. Keys that may change jobs see both: they debug
// deliveries.

// addrCandidate finds what may be an IP address in a text, with its
// port: IPv4 (10.0.0.2:53), IPv6 in brackets ([fd00::1]:443) or bare
// (fd00::1). Each candidate is checked with netip before it is hidden,
// so a time of day (12:04:05) is left alone.
var addrCandidate = regexp.MustCompile(`\[[0-9A-Fa-f:.%]+\](?::\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d{1,3}){0,3}`)

// cutAddrTail finds, at the end of a cut text, what may be the start of
// an address (digits, hex, dots and colons, with a colon or dot in it).
var cutAddrTail = regexp.MustCompile(`\[?[0-9A-Fa-f]*[:.][0-9A-Fa-f:.%]*$`)

// hiddenAddr replaces an address in a read-only caller's view.
const hiddenAddr = "[address hidden]"

// hideAddrs replaces the IP addresses (and their ports) in s.
func hideAddrs(s string) string {
	return addrCandidate.ReplaceAllStringFunc(s, func(m string) string {
		if _, err := netip.ParseAddrPort(m); err == nil {
			return hiddenAddr
		}
		if len(m) > 1 && m[0] == '[' {
			if _, err := netip.ParseAddr(m[1 : len(m)-1]); err == nil {
				return hiddenAddr
			}
		}
		if _, err := netip.ParseAddr(m); err == nil {
			return hiddenAddr
		}
		return m
	})
}

// forCaller returns rec as r's caller may see it: rec itself for a
// caller that may change jobs, otherwise a copy without the lease token
// and, for a callback delivery, with the addresses in its errors hidden.
func (h *Handler) forCaller(r *http.Request, rec *store.JobRecord) *store.JobRecord {
	if rec == nil || !h.readOnly(r) {
		return rec
	}
	c := *rec
	c.LeaseToken = uuid.Nil
	if c.Kind == CallbackKind && len(c.Errors) > 0 {
		c.Errors = slices.Clone(c.Errors)
		for i := range c.Errors {
			text := c.Errors[i].Error
			if c.Brief != nil {
				// A listing cut the text: an address at its end may be
				// cut too, which hideAddrs would not recognize.
				text = cutAddrTail.ReplaceAllString(text, hiddenAddr)
			}
			c.Errors[i].Error = hideAddrs(text)
		}
	}
	return &c
}

// allForCaller is forCaller over a list, in a new slice.
func (h *Handler) allForCaller(r *http.Request, recs []*store.JobRecord) []*store.JobRecord {
	if !h.readOnly(r) {
		return recs
	}
	out := make([]*store.JobRecord, len(recs))
	for i, rec := range recs {
		out[i] = h.forCaller(r, rec)
	}
	return out
}
