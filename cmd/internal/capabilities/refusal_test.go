package capabilities

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/sqlitestore"
)

// TestWhatStoresRefuse is the audit of "a store refuses what it cannot do
// when it is asked, never on a job", on the stores that need no server:
// every option the capability table says a store has registers (flow
// options at Handle, a periodic schedule at Every, a typed result at
// HandleResult, a batch, a sequence), and a transaction of a type the
// store does not take fails at the call with ax.ErrTxUnsupported, before
// anything is stored. On the old code sqlitestore refused the flow
// options at Handle although the README said it had them.
func TestWhatStoresRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) store.Store
		// sqlTx and pgxTx: the transaction types the store takes.
		sqlTx, pgxTx bool
	}{
		{"memstore", func(*testing.T) store.Store { return memstore.New() }, false, false},
		{"sqlitestore", func(t *testing.T) store.Store {
			st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "ax.db"))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			return st
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			st := tc.open(t)
			s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), MaxPending: 1000})
			require.NoError(t, err, "Config.MaxPending needs flow control")
			nop := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
			for kind, opt := range map[string]ax.HandlerOption{
				"concurrency": ax.GlobalConcurrency(2),
				"rate":        ax.RateLimit(10, time.Second),
				"pending":     ax.MaxPending(10),
				"breaker":     ax.CircuitBreaker(ax.BreakerConfig{Failures: 3, CoolDown: time.Second, MaxCoolDown: time.Minute}),
				"partition":   ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 1}),
			} {
				require.NoError(t, s.Handle(kind, nop, opt), kind)
			}
			require.NoError(t, ax.HandleResult(s, "result", func(context.Context, *ax.Job, struct{}) (int, error) { return 1, nil }))
			require.NoError(t, s.Every("nightly", "0 3 * * *", nil))
			_, err = s.Schedule(ctx, "seq", nil, ax.Sequential("a"))
			require.NoError(t, err)
			_, err = s.ScheduleBatch(ctx, ax.Batch{Children: []ax.Request{{Kind: "child"}}, Completion: ax.Request{Kind: "done"}})
			require.NoError(t, err)

			// Transactions of a type the store does not take: refused at
			// the call, with nothing stored.
			if !tc.pgxTx {
				_, err = s.ScheduleTx(ctx, pgx.Tx(nil), "k", nil)
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = s.ScheduleBatchTx(ctx, pgx.Tx(nil), ax.Batch{Children: []ax.Request{{Kind: "child"}}, Completion: ax.Request{Kind: "done"}})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = s.ScheduleManyTx(ctx, pgx.Tx(nil), []ax.Request{{Kind: "k"}})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = ax.EnqueueTx(ctx, s, pgx.Tx(nil), refusedArgs{})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = ax.EnqueueManyTx(ctx, s, pgx.Tx(nil), []refusedArgs{{}})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
			}
			if !tc.sqlTx {
				_, err = ax.ScheduleTxOf(ctx, s, (*sql.Tx)(nil), "k", nil)
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = ax.ScheduleBatchTxOf(ctx, s, (*sql.Tx)(nil), ax.Batch{Children: []ax.Request{{Kind: "k"}}, Completion: ax.Request{Kind: "done"}})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = ax.ScheduleManyTxOf(ctx, s, (*sql.Tx)(nil), []ax.Request{{Kind: "k"}})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = ax.EnqueueTx(ctx, s, (*sql.Tx)(nil), refusedArgs{})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
				_, err = ax.EnqueueManyTx(ctx, s, (*sql.Tx)(nil), []refusedArgs{{}})
				require.ErrorIs(t, err, ax.ErrTxUnsupported)
			}
			n, err := s.Admin().Count(ctx, ax.JobFilter{Kinds: []string{"k"}})
			if !errors.Is(err, errors.ErrUnsupported) {
				require.NoError(t, err)
				require.Zero(t, n)
			}
		})
	}
}

// refusedArgs is a JobArgs of kind "k", the kind whose jobs the refusals
// above must not store.
type refusedArgs struct{}

// Kind names the job kind.
func (refusedArgs) Kind() string { return "k" }
