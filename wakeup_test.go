package ax

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWakeupsFireOncePerTime: wake-ups asked for at host times fire once
// each, in time order, at most one wheel tick late; asking twice for one
// tick fires once; a time already past fires at the next tick.
func TestWakeupsFireOncePerTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu    sync.Mutex
			fired []time.Duration
		)
		t0 := time.Now()
		w := newWakeups(time.Now, func() {
			mu.Lock()
			fired = append(fired, time.Since(t0))
			mu.Unlock()
		})
		w.start()
		defer w.stop()
		w.add(t0.Add(30 * time.Millisecond))
		w.add(t0.Add(10 * time.Millisecond))
		w.add(t0.Add(10 * time.Millisecond)) // the same tick again
		w.add(t0.Add(-time.Second))          // already past
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, fired, 3, "fired at %v", fired)
		require.LessOrEqual(t, fired[0], wakeupTick)
		require.GreaterOrEqual(t, fired[1], 10*time.Millisecond)
		require.LessOrEqual(t, fired[1], 10*time.Millisecond+wakeupTick)
		require.GreaterOrEqual(t, fired[2], 30*time.Millisecond)
		require.LessOrEqual(t, fired[2], 30*time.Millisecond+wakeupTick)
	})
}

// TestWakeupsUseTheHostClock: the wheel measures waits as durations, so a
// skewed Config.Clock shifts the times asked for, not the waits: a wake-up
// at "skewed now + 50ms" fires 50ms later.
func TestWakeupsUseTheHostClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		skew := 30 * time.Second
		now := func() time.Time { return time.Now().Add(skew) }
		done := make(chan time.Time, 1)
		w := newWakeups(now, func() { done <- time.Now() })
		w.start()
		defer w.stop()
		t0 := time.Now()
		w.add(now().Add(50 * time.Millisecond))
		at := <-done
		require.GreaterOrEqual(t, at.Sub(t0), 50*time.Millisecond)
		require.LessOrEqual(t, at.Sub(t0), 50*time.Millisecond+wakeupTick)
	})
}
