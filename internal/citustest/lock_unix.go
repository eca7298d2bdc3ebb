//go:build unix

package citustest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// holdLock takes the tests' lock file, exclusively or shared, until t ends.
func holdLock(t testing.TB, exclusive bool) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "ax-citus-tests.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("citustest: lock: %v", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("citustest: lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
