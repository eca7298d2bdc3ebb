package axhttp

import (
	"net/http"

	"go.uber.org/zap"
)

// DefaultMaxBodyBytes bounds request bodies: a batch of jobs with payloads
// up to the store's 1 MiB each still fits a few.
const DefaultMaxBodyBytes = 4 << 20

// protect wraps next in the API's middleware, outermost first: request ID
// and logging, body limit, authentication (when auth is not nil) with the
// per-key rate limit between the signature and the nonce. Handler.routes
// builds the same stack around the API, with the mount point, the client
// address's limits and the browser cross-origin check added, and the
// session in place of signatures for the dashboard.
func protect(log *zap.Logger, maxBody int64, auth *Auth, limit RateLimit, next http.Handler) http.Handler {
	kl := newKeyLimiters(limit)
	h := withRateLimit(kl, next)
	if auth != nil {
		h = auth.handler(next, authHooks{admit: func(w http.ResponseWriter, r *http.Request, keyID string) bool {
			if ok, delay := kl.allow(keyID); !ok {
				writeRateLimited(w, r, delay, "this key's request rate is over its limit")
				return false
			}
			return true
		}})
	}
	h = withBodyLimit(maxBody, h)
	return withRequestID(log, h)
}
