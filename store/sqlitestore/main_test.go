package sqlitestore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every Store a
// test opens is closed, and Close stops database/sql's goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
