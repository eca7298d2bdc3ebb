package pgstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnkeyedSweepBacksOff: a kind is swept at its first claim, then
// after 5 s; each sweep that marks nothing doubles the interval up to a
// minute, and one that marks jobs brings it back to 5 s. Kinds are timed
// apart.
func TestUnkeyedSweepBacksOff(t *testing.T) {
	var u unkeyedSweeps
	t0 := time.Unix(1_000_000, 0)
	require.Equal(t, []string{"a", "b"}, u.due([]string{"a", "b"}, t0), "first claim: both")
	u.swept([]string{"a", "b"}, nil, t0)
	now := t0
	for _, want := range []time.Duration{5, 10, 20, 40, 60, 60} {
		require.Empty(t, u.due([]string{"a"}, now.Add(want*time.Second-time.Millisecond)), "before %ds", want)
		now = now.Add(want * time.Second)
		require.Equal(t, []string{"a"}, u.due([]string{"a"}, now), "at %ds", want)
		u.swept([]string{"a"}, map[string]int{}, now)
	}
	u.swept([]string{"a"}, map[string]int{"a": 3}, now)
	require.Empty(t, u.due([]string{"a"}, now.Add(4*time.Second)))
	require.Equal(t, []string{"a"}, u.due([]string{"a"}, now.Add(5*time.Second)), "found some: every 5 s again")
	require.Equal(t, []string{"b"}, u.due([]string{"b"}, t0.Add(5*time.Second)), "b on its own interval")
	require.Equal(t, []string{"a"}, u.due([]string{"a"}, now.Add(-time.Second)), "a clock that went back sweeps")
}
