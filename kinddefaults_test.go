package ax_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestKindDefaultsApplyWhoeverSchedules (issue 23, defect 5): a job
// scheduled by a Scheduler with no handler for its kind (as ax serve and
// the HTTP API are) gets the attempts and priority of the kind's handler
// options, declared by the host that handles it, and runs there under
// that host's Timeout and RetryPolicy; a job's own MaxAttempts or
// Priority option still wins. Before the fix such a job got
// Config.MaxAttempts (20) and Normal.
func TestKindDefaultsApplyWhoeverSchedules(t *testing.T) {
	const timeout = 7 * time.Minute
	st := memstore.New()
	var (
		mu        sync.Mutex
		attempts  = map[string]int{} // job payload → attempts run
		deadlines []time.Duration    // what each attempt's context had left
		retries   atomic.Int64
	)
	policy := ax.RetryPolicyFunc(func(int, error) time.Duration {
		retries.Add(1)
		return 0
	})
	worker := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = 10 * time.Millisecond })
	require.NoError(t, ax.Handle(worker, "kd.fails", func(ctx context.Context, j *ax.Job, name string) error {
		dl, ok := ctx.Deadline()
		mu.Lock()
		defer mu.Unlock()
		attempts[name]++
		if ok {
			deadlines = append(deadlines, time.Until(dl))
		}
		return errors.New("always fails")
	}, ax.MaxAttempts(2), ax.Priority(ax.High), ax.Timeout(timeout), ax.Retry(policy)))
	start(t, worker) // declares the kind's defaults

	producer := newScheduler(t, st) // handles nothing and never starts, like ax serve
	tests := []struct {
		name         string
		opts         []ax.ScheduleOption
		wantAttempts int
		wantPriority ax.PriorityLevel
	}{
		{name: "kind defaults", wantAttempts: 2, wantPriority: ax.High},
		{name: "own max attempts", opts: []ax.ScheduleOption{ax.MaxAttempts(3)}, wantAttempts: 3, wantPriority: ax.High},
		{name: "own priority", opts: []ax.ScheduleOption{ax.Priority(ax.Low)}, wantAttempts: 2, wantPriority: ax.Low},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := retries.Load()
			res, err := producer.Schedule(t.Context(), "kd.fails", tc.name, tc.opts...)
			require.NoError(t, err)
			rec := waitState(t, st, res.ID, store.StateDead)
			require.Equal(t, tc.wantAttempts, rec.MaxAttempts)
			require.Equal(t, tc.wantAttempts, rec.Attempt)
			require.Equal(t, int(tc.wantPriority), rec.Priority)
			mu.Lock()
			require.Equal(t, tc.wantAttempts, attempts[tc.name])
			mu.Unlock()
			require.Equal(t, int64(tc.wantAttempts-1), retries.Load()-before, "the kind's RetryPolicy decides every retry")
		})
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, deadlines, 7, "every attempt has a deadline")
	for _, left := range deadlines {
		require.LessOrEqual(t, left, timeout, "each attempt runs under the kind's Timeout")
		require.Greater(t, left, timeout-time.Minute)
	}
}

// TestKindDefaultsUndeclared: with no host having declared the kind, a
// job scheduled where it is not handled gets Config.MaxAttempts and
// Normal, as documented; a store without KindDefaulter does the same.
func TestKindDefaultsUndeclared(t *testing.T) {
	tests := []struct {
		name string
		st   store.Store
	}{
		{name: "nothing declared", st: memstore.New()},
		{name: "store without KindDefaulter", st: struct{ store.Store }{memstore.New()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			producer := newScheduler(t, tc.st, func(c *ax.Config) { c.MaxAttempts = 4 })
			res, err := producer.Schedule(t.Context(), "kd.nobody", nil)
			require.NoError(t, err)
			rec, err := tc.st.Get(t.Context(), res.ID)
			require.NoError(t, err)
			require.Equal(t, 4, rec.MaxAttempts)
			require.Equal(t, store.PriorityNormal, rec.Priority)
		})
	}
}

// countingDefaulter counts KindDefaults reads.
type countingDefaulter struct {
	*memstore.Store
	reads atomic.Int32
}

func (c *countingDefaulter) KindDefaults(ctx context.Context, kinds []string) ([]store.KindDefaults, error) {
	c.reads.Add(1)
	return c.Store.KindDefaults(ctx, kinds)
}

// TestKindDefaultsReadOncePerTTL: a producer that handles nothing reads a
// kind's defaults once for many Schedule calls within kindDefaultsTTL, and
// again once it has passed; the defaults it read apply to every job.
func TestKindDefaultsReadOncePerTTL(t *testing.T) {
	st := &countingDefaulter{Store: memstore.New()}
	require.NoError(t, st.DeclareKindDefaults(context.Background(), []store.KindDefaults{{Kind: "mail", MaxAttempts: 2, Priority: int(ax.High)}}))
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	producer := newScheduler(t, st, func(c *ax.Config) {
		c.Clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	schedule := func() {
		res, err := producer.Schedule(context.Background(), "mail", nil)
		require.NoError(t, err)
		j, err := producer.Get(context.Background(), res.ID)
		require.NoError(t, err)
		require.Equal(t, 2, j.MaxAttempts)
	}
	for range 5 {
		schedule()
	}
	require.EqualValues(t, 1, st.reads.Load(), "one read within the TTL")
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	schedule()
	require.EqualValues(t, 2, st.reads.Load(), "read again once the TTL passed")
}
