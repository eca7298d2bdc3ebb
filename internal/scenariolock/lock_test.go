//go:build unix

package scenariolock

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestHoldExcludesAnotherHolder: while Hold's lock is held, another
// open file description of the lock file cannot take it. On a file of
// its own: the machine's lock may be held by a scenario package that go
// test runs beside this one.
func TestHoldExcludesAnotherHolder(t *testing.T) {
	lockPath = filepath.Join(t.TempDir(), "scenarios.lock")
	if err := Hold(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("a second holder took the lock (err %v), want EWOULDBLOCK", err)
	}
}
