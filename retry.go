package ax

import (
	"math/rand/v2"
	"time"
)

// RetryPolicy decides how long a failed job waits before its next attempt.
// Implementations must be safe for concurrent use.
type RetryPolicy interface {
	// NextRetry returns the delay before the attempt after the failed
	// attempt number attempt (1 for the first failure), measured from the
	// store's now when the failure is recorded.
	NextRetry(attempt int, err error) time.Duration
}

// RetryPolicyFunc adapts a function to RetryPolicy.
type RetryPolicyFunc func(attempt int, err error) time.Duration

// NextRetry calls f.
func (f RetryPolicyFunc) NextRetry(attempt int, err error) time.Duration { return f(attempt, err) }

// ExponentialBackoff is the default RetryPolicy: exponential backoff with
// full jitter. After failed attempt n the delay is drawn uniformly from
//
//	[0, min(Max, Base · 2^(n-1))]
//
// so retries of many jobs that failed together spread over the whole step
// instead of arriving in waves that flatten a recovering downstream. With the
// defaults (Base 1s, Max 1h) the upper bounds are:
//
//	attempt  1    2    3    4    5     6     7      8      9      10     11      12      13+
//	bound    1s   2s   4s   8s   16s   32s   1m4s   2m8s   4m16s  8m32s  17m4s   34m8s   1h
//
// With the default 20 attempts a job that always fails is dead after about
// 4 hours on average (at most about 9 h).
type ExponentialBackoff struct {
	// Base is the bound after the first failure. Defaults to 1s.
	Base time.Duration
	// Max caps the bound. Defaults to 1h.
	Max time.Duration
	// NoJitter, when true, waits the full bound each time (plain
	// exponential backoff). Only for comparisons and tests: without jitter
	// jobs that failed together retry together.
	NoJitter bool
	// Rand returns a float in [0, 1). Defaults to math/rand/v2.Float64.
	// Injected by tests for deterministic delays.
	Rand func() float64
}

// Default backoff bounds.
const (
	DefaultRetryBase = time.Second
	DefaultRetryMax  = time.Hour
)

// NextRetry implements RetryPolicy.
func (b ExponentialBackoff) NextRetry(attempt int, _ error) time.Duration {
	bound := b.Bound(attempt)
	if b.NoJitter {
		return bound
	}
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Float64
	}
	return time.Duration(rnd() * float64(bound))
}

// Bound returns the upper bound of the delay after failed attempt n.
func (b ExponentialBackoff) Bound(attempt int) time.Duration {
	base, ceiling := b.Base, b.Max
	if base <= 0 {
		base = DefaultRetryBase
	}
	if ceiling <= 0 {
		ceiling = DefaultRetryMax
	}
	bound := base
	for i := 1; i < attempt && bound < ceiling; i++ {
		if bound > ceiling/2 {
			return ceiling // doubling would pass the ceiling, or overflow
		}
		bound *= 2
	}
	return min(bound, ceiling)
}
