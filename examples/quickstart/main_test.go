package main

import (
	"testing"

	"github.com/axsched/ax/internal/pgtest"
)

// TestQuickstart runs the README's first command on both stores, so a
// broken quickstart fails CI.
func TestQuickstart(t *testing.T) {
	t.Run("memstore", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "")
		if err := run(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Setenv("DATABASE_URL", pgtest.DSN(t))
		if err := run(); err != nil {
			t.Fatal(err)
		}
	})
}
