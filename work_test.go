package ax_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestRunDue runs due jobs inline, in priority then run_at order, retries
// due at once included, and leaves jobs not yet due alone.
func TestRunDue(t *testing.T) {
	st := memstore.New()
	s := newScheduler(t, st, func(c *ax.Config) { c.RetryPolicy = noDelay })
	var order []string
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		order = append(order, string(j.Payload))
		if string(j.Payload) == `"flaky"` && j.Attempt == 1 {
			return errors.New("once")
		}
		return nil
	})))
	ctx := t.Context()
	for _, c := range []struct {
		name string
		p    ax.PriorityLevel
	}{{"low", ax.Low}, {"flaky", ax.Normal}, {"high", ax.High}} {
		_, err := s.Schedule(ctx, "k", c.name, ax.Priority(c.p))
		require.NoError(t, err)
	}
	later, err := s.Schedule(ctx, "k", "later", ax.In(time.Hour))
	require.NoError(t, err)
	n, err := s.RunDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, []string{`"high"`, `"flaky"`, `"flaky"`, `"low"`}, order)
	require.Equal(t, store.StateScheduled, get(t, st, later.ID).State)

	start(t, s)
	_, err = s.RunDue(ctx)
	require.ErrorIs(t, err, ax.ErrSchedulerRunning)
}
