package axhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
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
	ProblemRateLimited     = ProblemTypeBase + "rate-limited"     // 429: the key's or the client address's limit is exhausted
	ProblemMethod          = ProblemTypeBase + "method"           // 405: the route does not take this method
	ProblemUnsupported     = ProblemTypeBase + "unsupported"      // 501: the store cannot do this
	ProblemInternal        = ProblemTypeBase + "internal"         // 500: an unexpected error; the detail is logged, not returned
	ProblemUnavailable     = ProblemTypeBase + "unavailable"      // 503: the scheduler is stopping
	ProblemUnsupportedType = ProblemTypeBase + "unsupported-type" // 415: the body is not application/json
	ProblemBackpressure    = ProblemTypeBase + "backpressure"     // 503: the kind (or every kind) has too many pending jobs
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
	// retryAfter, when > 0, is sent as the Retry-After header, in seconds.
	retryAfter int
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
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// problemFor maps an error of the ax API to the problem a client sees.
// Errors of the client's input keep their text (it names what was
// wrong, never a secret); unexpected ones become 500 without detail and
// are logged with the request ID.
func problemFor(r *http.Request, err error) *Problem {
	var p *Problem
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, ax.ErrScheduleNotFound), errors.Is(err, ax.ErrNotFound):
		return problem(http.StatusNotFound, ProblemNotFound, clientText(err))
	case errors.Is(err, ax.ErrInvalidFilter), errors.Is(err, ax.ErrInvalidCursor),
		errors.Is(err, ax.ErrInvalidOption), errors.Is(err, ax.ErrInvalidKind), errors.Is(err, ax.ErrUnknownKind),
		errors.Is(err, ax.ErrInvalidPayload), errors.Is(err, ax.ErrInvalidSchedule),
		errors.Is(err, ax.ErrFilterMatchesAll), errors.Is(err, ErrCallbackURL),
		errors.Is(err, store.ErrInvalidParams):
		return problem(http.StatusBadRequest, ProblemBadRequest, clientText(err))
	case errors.Is(err, ax.ErrBackpressure):
		// The queue is full (ax.MaxPending, Config.MaxPending): nothing was
		// stored; the client tries again later.
		p := problem(http.StatusServiceUnavailable, ProblemBackpressure, clientText(err))
		p.retryAfter = 1
		return p
	case errors.Is(err, errors.ErrUnsupported):
		return problem(http.StatusNotImplemented, ProblemUnsupported, "the store cannot do this")
	case errors.Is(err, ax.ErrSchedulerClosed):
		return problem(http.StatusServiceUnavailable, ProblemUnavailable, "the scheduler is stopping")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return problem(http.StatusServiceUnavailable, ProblemUnavailable, "the request was cut short")
	}
	logFrom(r.Context()).Error("request failed", zap.Error(err))
	return problem(http.StatusInternalServerError, ProblemInternal, "an unexpected error; see the server log for this request ID")
}

// clientText is an input error's message without the Go call chain
// prefixes that name our functions ("list jobs: ").
func clientText(err error) string {
	msg := err.Error()
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	return msg
}

// writeJSON writes v as the JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}
