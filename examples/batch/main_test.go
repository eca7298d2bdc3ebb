package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBatch runs the example on SQLite and PostgreSQL: the completion job
// runs once, after every child, and sees the dead one.
func TestBatch(t *testing.T) {
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
			for _, want := range []string{
				tc.where,
				": 5 children, completion job ",
				"children: 4 succeeded, 1 dead, 0 pending",
				"completion: 27 words in 4 lines, 1 line(s) dead",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
