package citustest

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// A test that uses the cluster holds a shared lock on a file that the
// Citus tests of every package (each package is its own process under go
// test ./...) open; a test that restarts or crashes a node of the cluster
// holds it exclusively (Exclusive), so that no other test's connection
// dies under it.
var (
	locked    sync.Map    // testing.TB → true, once the test holds the lock
	exclusive atomic.Bool // this process holds the lock exclusively: its subtests need none
)

// lockShared takes the shared lock for t unless t holds a lock already.
func lockShared(t testing.TB) {
	if exclusive.Load() {
		return
	}
	if _, held := locked.LoadOrStore(t, true); held {
		return
	}
	t.Cleanup(func() { locked.Delete(t) })
	holdLock(t, false)
}

// ExclusiveEnv names the variable that lets the tests that need the
// cluster to themselves run (Exclusive): CI runs them in a step of their
// own, after the other tests, so that none waits for the others.
const ExclusiveEnv = "AX_CITUS_EXCLUSIVE"

// Exclusive makes t the only test of any package using the cluster until
// it ends: it waits for the others to end and keeps new ones waiting. A
// test that stops, restarts or crashes a node calls it first, before
// anything else of this package. It skips t unless AX_CITUS_EXCLUSIVE=1.
func Exclusive(t testing.TB) {
	t.Helper()
	if os.Getenv(ExclusiveEnv) != "1" {
		t.Skipf("citustest: this test stops Citus nodes or changes the cluster: it runs with %s=1 (CI runs it in a step of its own)", ExclusiveEnv)
	}
	if _, held := locked.LoadOrStore(t, true); held {
		t.Fatal("citustest: Exclusive must come before the test's first use of the cluster")
	}
	t.Cleanup(func() { locked.Delete(t) })
	holdLock(t, true)
	exclusive.Store(true)
	t.Cleanup(func() { exclusive.Store(false) })
	// Probed under the lock, as in Require.
	available(t)
}
