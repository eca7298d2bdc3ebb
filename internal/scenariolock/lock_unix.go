//go:build unix

package scenariolock

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// path is the lock file, shared by every test process of the machine.
func path() string { return filepath.Join(os.TempDir(), "ax-scenarios.lock") }

// Hold takes the machine-wide scenario lock, waiting for the process
// that holds it, and keeps it until this process exits.
func Hold() error {
	f, err := os.OpenFile(path(), os.O_CREATE|os.O_RDWR, 0o666)
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
