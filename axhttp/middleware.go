package axhttp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// HeaderRequestID carries a request's ID, in and out.
const HeaderRequestID = "X-Request-ID"

// requestInfo is what the outermost middleware knows of a request; inner
// ones fill in the key that signed it, for the request's log line.
type requestInfo struct {
	id   string
	log  *zap.Logger
	base string // the mount point (withBase)
	// client is the address the request is counted against (withClient).
	client string

	mu    sync.Mutex
	keyID string
}

type requestInfoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

// RequestID returns the ID of the request of ctx ("" outside a request the
// Handler saw).
func RequestID(ctx context.Context) string {
	if ri := infoFrom(ctx); ri != nil {
		return ri.id
	}
	return ""
}

// logFrom returns the request's logger (with its request ID), or a no-op
// logger.
func logFrom(ctx context.Context) *zap.Logger {
	if ri := infoFrom(ctx); ri != nil {
		return ri.log
	}
	return zap.NewNop()
}

// noteKey records the key that signed the request, for its log line.
func noteKey(ctx context.Context, keyID string) {
	if ri := infoFrom(ctx); ri != nil {
		ri.mu.Lock()
		ri.keyID = keyID
		ri.mu.Unlock()
	}
}

func zapError(err error) zap.Field { return zap.Error(err) }

// withRequestID gives every request an ID — the client's X-Request-ID when
// it is a sane token (1 to 128 of [A-Za-z0-9._-]), otherwise a random one —
// echoes it in the response, and logs one line per request with it, the
// method, path, status, duration, key and client address.
func withRequestID(log *zap.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !validToken(id) {
			id = newRequestID()
		}
		w.Header().Set(HeaderRequestID, id)
		ri := &requestInfo{id: id, log: log.With(zap.String("request_id", id))}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		begin := time.Now()
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, ri)))
		ri.mu.Lock()
		key := ri.keyID
		ri.mu.Unlock()
		ri.log.Info("http request", zap.String("method", r.Method), zap.String("path", r.URL.Path),
			zap.Int("status", rec.status), zap.Float64("duration_ms", float64(time.Since(begin))/float64(time.Millisecond)),
			zap.String("key", key), zap.String("client", ri.client))
	})
}

// statusRecorder remembers the status written.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the status and writes it.
func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func validToken(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// withBodyLimit refuses bodies over limit bytes: a Content-Length over it
// at once, a longer stream when it is read (413 either way).
func withBodyLimit(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			writeProblem(w, r, problem(http.StatusRequestEntityTooLarge, ProblemTooLarge, fmt.Sprintf("the body is over %d bytes", limit)))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

// RateLimit bounds each key's requests: a token bucket refilled at
// PerSecond, holding Burst tokens.
type RateLimit struct {
	// PerSecond is the refill rate; zero or less means no limit.
	PerSecond float64
	// Burst is how many requests a key may make at once (at least 1).
	Burst int
}

// keyLimiters holds a token bucket per key ID.
type keyLimiters struct {
	limit RateLimit
	mu    sync.Mutex
	by    map[string]*rate.Limiter
}

// newKeyLimiters returns the buckets of limit, or nil for no limit.
func newKeyLimiters(limit RateLimit) *keyLimiters {
	if limit.PerSecond <= 0 {
		return nil
	}
	return &keyLimiters{limit: limit, by: make(map[string]*rate.Limiter)}
}

// maxLimiters bounds the buckets kept: past it, the full buckets (keys
// idle long enough to refill) are dropped.
const maxLimiters = 10000

// allow takes a token from key's bucket, or returns how long until one
// is there.
func (kl *keyLimiters) allow(key string) (bool, time.Duration) {
	if kl == nil {
		return true, 0
	}
	res := kl.get(key).Reserve()
	if delay := res.Delay(); delay > 0 {
		res.Cancel()
		return false, delay
	}
	return true, 0
}

// withRateLimit answers 429 with Retry-After when the request's key has
// used its tokens. Requests without an identity (no Auth in front) share
// one bucket. A nil kl lets everything through.
func withRateLimit(kl *keyLimiters, next http.Handler) http.Handler {
	if kl == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := IdentityFrom(r.Context())
		if ok, delay := kl.allow(id.KeyID); !ok {
			writeRateLimited(w, r, delay, "this key's request rate is over its limit")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeRateLimited answers 429 with a Retry-After of delay (whole
// seconds, at least 1).
func writeRateLimited(w http.ResponseWriter, r *http.Request, delay time.Duration, detail string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(int(math.Ceil(delay.Seconds())), 1)))
	writeProblem(w, r, problem(http.StatusTooManyRequests, ProblemRateLimited, detail))
}

// spent reports how long until key's bucket holds a token again, without
// taking one (0: it holds one now).
func (kl *keyLimiters) spent(key string) time.Duration {
	if kl == nil {
		return 0
	}
	kl.mu.Lock()
	lim := kl.by[key] // no bucket yet: nothing spent, and none made
	kl.mu.Unlock()
	if lim == nil {
		return 0
	}
	tokens := lim.Tokens()
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) / float64(lim.Limit()) * float64(time.Second))
}

// take takes a token from key's bucket if one is there.
func (kl *keyLimiters) take(key string) {
	if kl != nil {
		kl.get(key).Allow()
	}
}

func (kl *keyLimiters) get(key string) *rate.Limiter {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	lim := kl.by[key]
	if lim == nil {
		if len(kl.by) >= maxLimiters {
			for k, l := range kl.by {
				if l.Tokens() >= float64(l.Burst()) {
					delete(kl.by, k)
				}
			}
		}
		lim = rate.NewLimiter(rate.Limit(kl.limit.PerSecond), max(kl.limit.Burst, 1))
		kl.by[key] = lim
	}
	return lim
}

// hstsValue is the Strict-Transport-Security header of answers over TLS:
// a year, the host only (the handler knows nothing of subdomains).
const hstsValue = "max-age=31536000"

// withHSTS tells browsers, on every answer sent over a TLS connection
// this process terminates (ax serve --tls-cert), to reach the host by
// HTTPS only: a later plain-HTTP link cannot then carry a session cookie
// or be tampered with. Answers over plain connections carry no header
// (browsers ignore it there); behind a TLS-terminating proxy the proxy
// should send it.
func withHSTS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", hstsValue)
		}
		next.ServeHTTP(w, r)
	})
}
