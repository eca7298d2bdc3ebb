//go:build !linux

package ax

import "time"

// preciseSleeps says whether preciseSleep is more precise than a timer.
const preciseSleeps = false

// preciseSleep is time.Sleep where no precise sleep is used.
func preciseSleep(d time.Duration) bool {
	time.Sleep(d)
	return true
}
