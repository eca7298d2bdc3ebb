package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFlow runs the example on SQLite and PostgreSQL. Its run fails when
// a limit did not hold (more than 2 running, more than 5 starts in a
// window, other than 3 failed attempts); the test also checks that the
// breaker went through its states in order.
func TestFlow(t *testing.T) {
	demotest.OnEachStore(t, run, []string{
		"GlobalConcurrency(2): 12 jobs on 2 hosts, at most ",
		"PartitionBy(subscriber, 1): 6 healthy deliveries done while the down subscriber's hung (1 of its 3 started)",
		"RateLimit(5, 500ms): 12 starts over ",
		"CircuitBreaker(Failures: 3): 3 attempts failed, then:\n  breaker_opened (3 failed attempts in a row)\n  breaker_half_open ",
		"  breaker_closed (probe succeeded)\n  all 4 payments captured",
	}, nil)
}
