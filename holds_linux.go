package ax

import (
	"syscall"
	"time"
)

// preciseSleeps says whether preciseSleep is more precise than a timer.
const preciseSleeps = true

// preciseSleep sleeps for d in a nanosleep system call, which the kernel
// ends within tens of microseconds of d, and reports whether it slept the
// whole of d (false: a signal cut it short).
func preciseSleep(d time.Duration) bool {
	ts := syscall.NsecToTimespec(int64(d))
	return syscall.Nanosleep(&ts, nil) == nil
}
