// Package demotest runs an example's run function on each store the
// examples support, as their tests do: the embedded SQLite file (no
// DATABASE_URL) and a fresh PostgreSQL database.
package demotest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/axsched/ax/internal/pgtest"
)

// OnEachStore runs run on SQLite and on PostgreSQL, each in a subtest,
// fails the subtest if it returns an error or its output lacks one of
// want (the store's own "SQLite at" / "PostgreSQL at" line is checked
// too), and hands the output to check, if not nil, for what the example
// checks beyond that.
func OnEachStore(t *testing.T, run func(context.Context, io.Writer) error, want []string, check func(t *testing.T, out string)) {
	for _, tc := range []struct {
		name, where string
		dsn         func(t *testing.T) string
	}{
		{"sqlite", "SQLite at", func(*testing.T) string { return "" }},
		{"postgres", "PostgreSQL at", func(t *testing.T) string { return pgtest.DSN(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", tc.dsn(t))
			var buf bytes.Buffer
			if err := run(t.Context(), &buf); err != nil {
				t.Fatalf("%v\n%s", err, buf.String())
			}
			out := buf.String()
			for _, w := range append([]string{tc.where}, want...) {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if check != nil {
				check(t, out)
			}
		})
	}
}
