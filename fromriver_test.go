package ax_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestFromRiverUniqueStates (issue 40) holds docs/from-river.md's mapping
// of River's unique states to what AX's options do. River's default
// (UniqueOpts.ByState unset) keeps the key of a completed job; the doc
// once mapped it to AX's default, which frees it, and a ported
// UniqueOpts{ByArgs: true} re-delivered webhooks that had succeeded. For
// each row naming River's unique states, the test schedules a job with
// the AX options the row names, runs it to success, schedules the same
// key again, and requires the duplicate verdict River's row implies.
func TestFromRiverUniqueStates(t *testing.T) {
	doc, err := os.ReadFile("docs/from-river.md")
	require.NoError(t, err)
	rows := map[string]string{} // first cell → second cell
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) >= 4 && strings.Contains(cells[1], "`ByState`") {
			rows[strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[2])
		}
	}
	cases := []struct {
		river string // how the row starts
		// heldAfterSuccess is River's verdict: does a completed job keep
		// its key under these states?
		heldAfterSuccess bool
	}{
		{"`ByState` default", true},
		{"`ByState` with live states only", false},
	}
	for _, c := range cases {
		t.Run(c.river, func(t *testing.T) {
			var ax2 string
			for river, a := range rows {
				if strings.HasPrefix(river, c.river) {
					ax2 = a
				}
			}
			require.NotEmpty(t, ax2, "docs/from-river.md has no row for %s", c.river)
			var opts []ax.ScheduleOption
			if strings.Contains(ax2, "ax.UniqueWhileFinished()") {
				opts = append(opts, ax.UniqueWhileFinished())
			}
			s := newScheduler(t, newMemstore())
			require.NoError(t, s.Handle("hook", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
			ctx := t.Context()
			first, err := s.Schedule(ctx, "hook", nil, append([]ax.ScheduleOption{ax.UniqueKey("evt-1")}, opts...)...)
			require.NoError(t, err)
			n, err := s.RunDue(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			again, err := s.Schedule(ctx, "hook", nil, append([]ax.ScheduleOption{ax.UniqueKey("evt-1")}, opts...)...)
			require.NoError(t, err)
			require.Equal(t, c.heldAfterSuccess, again.Duplicate,
				"River's %s holds a completed job's key: %v; the doc's AX equivalent (%s) does: %v", c.river, c.heldAfterSuccess, ax2, again.Duplicate)
			if again.Duplicate {
				require.Equal(t, first.ID, again.ID)
			}
		})
	}
}
