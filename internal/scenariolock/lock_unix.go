//go:build unix

package scenariolock

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockPath is the lock file, shared by every test process of the
// machine (this package's own test points it elsewhere, so that it does
// not wait for the scenario packages).
var lockPath = filepath.Join(os.TempDir(), "ax-scenarios.lock")

// Hold takes the machine-wide scenario lock, waiting for the process
// that holds it, and keeps it until this process exits.
func Hold() error {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return fmt.Errorf("scenariolock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return fmt.Errorf("scenariolock: %w", err)
	}
	held = f // never closed: the lock ends with the process
	return nil
}

// held keeps the locked file open (and reachable) for the process's life.
var held *os.File
