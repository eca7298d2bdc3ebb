package ax

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHoldsReleaseInOrder: each hold is released at its start time, in
// start order, a start added before the pending ones included; starts
// already past are released at once. In a synctest bubble the clock
// stands still across a precise sleep, so holds falls back to timers.
func TestHoldsReleaseInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHolds(time.Now)
		h.start()
		defer h.stop()
		t0 := time.Now()
		offsets := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, time.Second, -time.Millisecond, 10 * time.Millisecond}
		released := make(chan time.Duration, len(offsets))
		for _, d := range offsets {
			ch := h.add(t0.Add(d))
			go func() {
				<-ch
				released <- time.Since(t0)
			}()
		}
		var got []time.Duration
		for range offsets {
			got = append(got, <-released)
		}
		require.Equal(t, []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, time.Second}, got)
		require.False(t, h.precise, "precise sleeps kept under a clock that stands still")
	})
}

// TestHoldsNeverReleaseEarly: on the real clock no hold is released
// before its start time (how late it may be is axbench lag's to measure,
// not a test's).
func TestHoldsNeverReleaseEarly(t *testing.T) {
	h := newHolds(time.Now)
	h.start()
	defer h.stop()
	for _, d := range []time.Duration{0, 100 * time.Microsecond, 1500 * time.Microsecond, 3 * time.Millisecond, 20 * time.Millisecond} {
		at := time.Now().Add(d)
		<-h.add(at)
		require.False(t, time.Now().Before(at), "released %s before its start", at.Sub(time.Now()))
	}
	require.Equal(t, preciseSleeps, h.precise, "precise sleeps turned off on the real clock")
}

// TestHoldsStopWithPendingHolds: stop returns while holds are pending;
// they are never released (their attempts end on their contexts).
func TestHoldsStopWithPendingHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHolds(time.Now)
		h.start()
		ch := h.add(time.Now().Add(time.Hour))
		h.stop()
		time.Sleep(2 * time.Hour)
		select {
		case <-ch:
			t.Fatal("a pending hold was released after stop")
		default:
		}
	})
}
