package capabilities

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store/pgstore"
)

// TestCitusRefuses: every feature the capability table says the Citus
// store lacks is refused when it is asked for (at New, Handle,
// HandleResult, Schedule, ScheduleBatch), never on a job, and nothing is
// stored; what the table says it has (plain handlers, periodic
// schedules, ScheduleTx) works.
func TestCitusRefuses(t *testing.T) {
	pool, schema := citustest.Schema(t)
	ctx := t.Context()
	require.NoError(t, pgstore.MigrateCitus(ctx, pool, pgstore.WithSchema(schema), pgstore.WithCitusShards(2)))
	st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })

	_, err = ax.New(ax.Config{Store: st, Logger: zap.NewNop(), MaxPending: 1000})
	require.ErrorIs(t, err, ax.ErrInvalidConfig, "Config.MaxPending needs flow control")

	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	nop := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	for kind, opt := range flowOptions() {
		require.ErrorIs(t, s.Handle(kind, nop, opt), errors.ErrUnsupported, kind)
	}
	require.Error(t, ax.HandleResult(s, "result", func(context.Context, *ax.Job, struct{}) (int, error) { return 1, nil }),
		"results need a FollowUpStore")
	_, err = s.Schedule(ctx, "seq", nil, ax.Sequential("a"))
	require.Error(t, err, "sequences need flow control")
	_, err = s.ScheduleBatch(ctx, ax.Batch{Children: []ax.Request{{Kind: "child"}}, Completion: ax.Request{Kind: "done"}})
	require.ErrorIs(t, err, errors.ErrUnsupported, "batches need a BatchStore")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.jobs`).Scan(&n))
	require.Zero(t, n, "a refused call stored a job")

	// What it has.
	require.NoError(t, s.Handle("plain", nop))
	require.NoError(t, s.Every("nightly", "0 3 * * *", nil))
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = s.ScheduleTx(ctx, tx, "plain", nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.jobs`).Scan(&n))
	require.Equal(t, 1, n)
}
