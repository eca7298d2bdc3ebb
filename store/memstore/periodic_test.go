package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// tick returns params firing one tick of schedule "p" at at, with a job.
func tick(at time.Time) *store.FirePeriodicParams {
	job := params("p")
	job.RunAt = at
	return &store.FirePeriodicParams{Name: "p", Spec: "@every 1s", Ticks: []store.PeriodicTick{{At: at, Job: &job}}}
}

// TestPeriodicTickDueAtStoreNow checks, on the store's clock, that a tick
// applies from the instant the clock reaches it, not a microsecond
// earlier.
func TestPeriodicTickDueAtStoreNow(t *testing.T) {
	st, clk := newStore(t)
	now := clk.Now()
	tests := []struct {
		name    string
		at      time.Time
		applied bool
	}{
		{"a microsecond ahead", now.Add(time.Microsecond), false},
		{"at now", now, true},
		{"at now again: already fired", now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := st.FirePeriodic(context.Background(), tick(tt.at))
			require.NoError(t, err)
			require.Equal(t, []bool{tt.applied}, res.Applied)
			require.Equal(t, now, res.Now)
		})
	}
}

// TestPeriodicAfterCloseOrCancel checks every PeriodicStore method fails,
// changing nothing, on a cancelled context or a closed store.
func TestPeriodicAfterCloseOrCancel(t *testing.T) {
	st, clk := newStore(t)
	_, err := st.DeclarePeriodic(context.Background(), &store.DeclarePeriodicParams{Name: "p", Spec: "@every 1s"})
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"declare", func(ctx context.Context) error {
			_, err := st.DeclarePeriodic(ctx, &store.DeclarePeriodicParams{Name: "q", Spec: "x"})
			return err
		}},
		{"fire", func(ctx context.Context) error { _, err := st.FirePeriodic(ctx, tick(clk.Now())); return err }},
		{"state", func(ctx context.Context) error { _, err := st.PeriodicState(ctx, "p"); return err }},
	}
	for _, c := range calls {
		t.Run("cancelled "+c.name, func(t *testing.T) {
			require.ErrorIs(t, c.call(cancelled), context.Canceled)
			got, err := st.PeriodicState(context.Background(), "p")
			require.NoError(t, err)
			require.Equal(t, store.DeclarationTick(clk.Now()), got.LastTick)
		})
	}
	require.NoError(t, st.Close())
	for _, c := range calls {
		t.Run("closed "+c.name, func(t *testing.T) {
			require.ErrorIs(t, c.call(context.Background()), store.ErrClosed)
		})
	}
}
