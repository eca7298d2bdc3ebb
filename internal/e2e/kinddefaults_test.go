package e2e_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestPGKindDefaultsWhoeverSchedules (issue 23, defect 5) on PostgreSQL: a
// job scheduled by a Scheduler that handles nothing and never starts (as
// ax serve) runs exactly as many times as the kind's handler allows
// (MaxAttempts(1)), not Config.MaxAttempts.
func TestPGKindDefaultsWhoeverSchedules(t *testing.T) {
	st, _ := newPG(t)
	var runs atomic.Int64
	worker := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = 50 * time.Millisecond })
	require.NoError(t, worker.Handle("kd.e2e", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		runs.Add(1)
		return errors.New("always fails")
	}), ax.MaxAttempts(1), ax.Priority(ax.Low)))
	ctx := t.Context()
	require.NoError(t, worker.Start(ctx))

	producer := newScheduler(t, st)
	res, err := producer.Schedule(ctx, "kd.e2e", nil)
	require.NoError(t, err)
	rec := waitState(t, producer, res.ID, ax.StateDead, 20*time.Second)
	require.Equal(t, 1, rec.MaxAttempts)
	require.Equal(t, 1, rec.Attempt)
	require.Equal(t, int(ax.Low), rec.Priority)
	require.Equal(t, int64(1), runs.Load())
}
