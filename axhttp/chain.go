package axhttp

import (
	"net/http"

	"go.uber.org/zap"
)

// DefaultMaxBodyBytes bounds request bodies: a batch of jobs with payloads
// up to the store's 1 MiB each still fits a few.
const DefaultMaxBodyBytes = 4 << 20

// protect wraps next in the API's middleware, outermost first: request ID
// and logging, body limit, authentication (when auth is not nil), per-key
// rate limit. Handler.routes builds the same stack around the API, with
// the mount point and the browser cross-origin check added, and the
// session in place of signatures for the dashboard.
func protect(log *zap.Logger, maxBody int64, auth *Auth, limit RateLimit, next http.Handler) http.Handler {
	h := withRateLimit(newKeyLimiters(limit), next)
	if auth != nil {
		h = auth.Middleware(h)
	}
	h = withBodyLimit(maxBody, h)
	return withRequestID(log, h)
}
