package main

import (
	"testing"

	"github.com/axsched/ax/internal/pgtest"
)

// TestTransactional runs the example against a fresh database.
func TestTransactional(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.DSN(t))
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
