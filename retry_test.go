package ax_test

import (
	"errors"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/stretchr/testify/require"
)

// TestExponentialBackoffBounds checks the documented schedule of bounds.
func TestExponentialBackoffBounds(t *testing.T) {
	b := ax.ExponentialBackoff{}
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {7, 64 * time.Second},
		{12, 2048 * time.Second}, {13, time.Hour}, {100, time.Hour}, {1 << 30, time.Hour},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, b.Bound(tt.attempt), "attempt %d", tt.attempt)
	}
}

// TestExponentialBackoffJitter checks full jitter spreads delays over the
// whole step and NoJitter waits the full bound.
func TestExponentialBackoffJitter(t *testing.T) {
	tests := []struct {
		name string
		rand float64
		no   bool
		want time.Duration
	}{
		{"bottom of the step", 0, false, 0},
		{"middle of the step", 0.5, false, 4 * time.Second},
		{"top of the step", 0.999, false, 7992 * time.Millisecond},
		{"no jitter", 0.5, true, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ax.ExponentialBackoff{NoJitter: tt.no, Rand: func() float64 { return tt.rand }}
			require.Equal(t, tt.want, b.NextRetry(4, errors.New("x")))
		})
	}
}

// TestExponentialBackoffCustom checks Base and Max.
func TestExponentialBackoffCustom(t *testing.T) {
	b := ax.ExponentialBackoff{Base: 100 * time.Millisecond, Max: time.Second, NoJitter: true}
	require.Equal(t, 100*time.Millisecond, b.NextRetry(1, nil))
	require.Equal(t, 800*time.Millisecond, b.NextRetry(4, nil))
	require.Equal(t, time.Second, b.NextRetry(5, nil))
}
