//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlitestore

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockFile takes an exclusive flock on path (created if missing) and
// returns the open file holding it. The lock is released when the file is
// closed or the process dies, however it dies: a SIGKILL leaves no stale
// lock behind.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
					holder = fmt.Sprintf("process %d", pid)
					if pid == os.Getpid() {
						holder = "another Store of this process"
					}
				}
			}
			return nil, fmt.Errorf("%w: %s holds %s", ErrLocked, holder, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Record who holds it, for the error a second opener gets.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
