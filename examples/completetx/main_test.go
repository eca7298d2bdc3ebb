package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCompleteTx runs the example on each store with a transaction type
// (SQLite's *sql.Tx, PostgreSQL's pgx.Tx) and checks its story: the
// crashed attempt left nothing behind, and every order was charged and
// shipped once.
func TestCompleteTx(t *testing.T) {
	demotest.OnEachStore(t, run, []string{
		"-2: charge job succeeded on attempt 2 (attempt 1: order ",
		"simulated crash before commit (charge, success and follow-up roll back))",
		"-1: charge job succeeded on attempt 1\n",
		"every order charged once and shipped once",
	}, func(t *testing.T, out string) {
		if n := strings.Count(out, "shipped by the job its charge added"); n != 3 {
			t.Errorf("%d shipments printed, want 3:\n%s", n, out)
		}
	})
}
