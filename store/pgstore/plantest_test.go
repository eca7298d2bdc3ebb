package pgstore_test

import (
	"testing"

	"github.com/axsched/ax/internal/raceflag"
)

// planTest skips a test of the server's plans under -short, where load
// (what it writes before it plans) is too slow, and in a test binary
// built with -race. A plan test's work is the server's (loading rows,
// then planning and explaining the Store's statements), and its Go code
// is the statements' that the package's other tests run under the race
// detector; CI runs the plan tests in its plain run (go test ./...).
// Under -race they added about 50 s of server work to CI's race run
// (TestListOnLargeHistory 28 s of it).
func planTest(t *testing.T, load string) {
	t.Helper()
	if testing.Short() {
		t.Skip(load)
	}
	if raceflag.Enabled {
		t.Skip("a plan test: runs without -race (go test ./store/pgstore)")
	}
}
