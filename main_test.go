package ax

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running after
// them: every Scheduler a test starts must be stopped without leaks.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
