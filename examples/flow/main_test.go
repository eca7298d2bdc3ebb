package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFlow runs the example on SQLite and PostgreSQL. Its run fails when
// a limit did not hold (more than 2 running, more than 5 starts in a
// window, other than 3 failed attempts); the test also checks that the
// breaker went through its states in order.
func TestFlow(t *testing.T) {
	for _, tc := range []struct {
		name, where string
		dsn         func(t *testing.T) string
	}{
		{"sqlite", "SQLite at", func(*testing.T) string { return "" }},
		{"postgres", "PostgreSQL at", func(t *testing.T) string { return pgtest.DSN(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", tc.dsn(t))
			var out bytes.Buffer
			if err := run(t.Context(), &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			got := out.String()
			want := []string{
				tc.where,
				"GlobalConcurrency(2): 12 jobs on 2 hosts, at most ",
				"RateLimit(5, 500ms): 12 starts over ",
				"CircuitBreaker(Failures: 3): 3 attempts failed, then:\n  breaker_opened (3 failed attempts in a row)\n  breaker_half_open ",
				"  breaker_closed (probe succeeded)\n  all 4 payments captured",
			}
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
