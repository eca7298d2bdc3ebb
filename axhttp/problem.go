package axhttp

import (
	"encoding/json"
	"net/http"
)

// ProblemTypeBase prefixes every problem type this package writes. The
// types are stable identifiers: clients switch on them, never on titles or
// details, which may change.
const ProblemTypeBase = "urn:ax:problem:"

// Problem types (RFC 9457 "type" members) of the API's errors.
const (
	ProblemUnauthorized    = ProblemTypeBase + "unauthorized"     // 401: missing, expired, reused or wrong signature, unknown key
	ProblemForbidden       = ProblemTypeBase + "forbidden"        // 403: a read-only key asked to change something, or a bad CSRF token
	ProblemNotFound        = ProblemTypeBase + "not-found"        // 404: no such job, schedule or route
	ProblemBadRequest      = ProblemTypeBase + "bad-request"      // 400: malformed JSON, invalid parameter or option
	ProblemConflict        = ProblemTypeBase + "conflict"         // 409: the job's state does not allow the operation
	ProblemTooLarge        = ProblemTypeBase + "too-large"        // 413: the body is over the limit
	ProblemRateLimited     = ProblemTypeBase + "rate-limited"     // 429: the key's rate limit is exhausted
	ProblemMethod          = ProblemTypeBase + "method"           // 405: the route does not take this method
	ProblemUnsupported     = ProblemTypeBase + "unsupported"      // 501: the store cannot do this
	ProblemInternal        = ProblemTypeBase + "internal"         // 500: an unexpected error; the detail is logged, not returned
	ProblemUnavailable     = ProblemTypeBase + "unavailable"      // 503: the scheduler is stopping
	ProblemUnsupportedType = ProblemTypeBase + "unsupported-type" // 415: the body is not application/json
)

// Problem is an RFC 9457 problem details object, written with content type
// application/problem+json.
type Problem struct {
	// Type identifies the kind of problem (one of the Problem* constants).
	Type string `json:"type"`
	// Title is a short human summary of the type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence, for humans. It never holds
	// secrets: no key material, no signatures, no internal errors.
	Detail string `json:"detail,omitempty"`
	// Instance identifies this occurrence: the request ID.
	Instance string `json:"instance,omitempty"`
}

// Error implements error, so handlers can return a Problem.
func (p *Problem) Error() string { return p.Title + ": " + p.Detail }

// problem builds a Problem of type typ with the status's text as title.
func problem(status int, typ, detail string) *Problem {
	return &Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail}
}

// writeProblem writes p as the response, with the request ID as instance.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" {
		p.Instance = RequestID(r.Context())
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
