package sqlitetest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the Scheduler
// is stopped and the file closed when each test ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
