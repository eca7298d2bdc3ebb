package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCompleteTx runs the example on each store with a transaction type
// (SQLite's *sql.Tx, PostgreSQL's pgx.Tx) and checks its story: the
// crashed attempt left nothing behind, and every order was charged and
// shipped once.
func TestCompleteTx(t *testing.T) {
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
			for _, want := range []string{
				tc.where,
				"-2: charge job succeeded on attempt 2 (attempt 1: order ",
				"simulated crash before commit (charge, success and follow-up roll back))",
				"-1: charge job succeeded on attempt 1\n",
				"every order charged once and shipped once",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			if n := strings.Count(got, "shipped by the job its charge added"); n != 3 {
				t.Errorf("%d shipments printed, want 3:\n%s", n, got)
			}
		})
	}
}
