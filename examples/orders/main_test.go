package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOrders runs the order service on the embedded store and on
// PostgreSQL: every order is paid once and shipped once (a quarter of
// the payments roll back once after CompleteTx), the gateway's global
// limit holds. On SQLite it runs twice on one file, as a restarted
// service would.
func TestOrders(t *testing.T) {
	check := func(t *testing.T, out string) {
		t.Helper()
		for _, want := range []string{"placed 12 orders", "12 payments (3 by a retry after a rollback), 12 shipments for 12 orders", "every order paid once and shipped once"} {
			if !strings.Contains(out, want) {
				t.Fatalf("output lacks %q:\n%s", want, out)
			}
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "")
		path := filepath.Join(t.TempDir(), "orders.db")
		for range 2 {
			var out bytes.Buffer
			if err := run(t.Context(), path, 12, &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			check(t, out.String())
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Setenv("DATABASE_URL", pgtest.DSN(t))
		var out bytes.Buffer
		if err := run(t.Context(), "", 12, &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		check(t, out.String())
	})
}
