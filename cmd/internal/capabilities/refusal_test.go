package capabilities

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
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
			for kind, opt := range flowOptions() {
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

// flowOptions are the handler options of flow control, by the kind the
// tests register them for.
func flowOptions() map[string]ax.HandlerOption {
	return map[string]ax.HandlerOption{
		"concurrency": ax.GlobalConcurrency(2),
		"rate":        ax.RateLimit(10, time.Second),
		"pending":     ax.MaxPending(10),
		"breaker":     ax.CircuitBreaker(ax.BreakerConfig{Failures: 3, CoolDown: time.Second, MaxCoolDown: time.Minute}),
		"partition":   ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 1}),
		"partbreaker": ax.PartitionBreaker(ax.PartitionByMetadata("tenant"), ax.BreakerConfig{Failures: 3}),
	}
}

// refusedArgs is a JobArgs of kind "k", the kind whose jobs the refusals
// above must not store.
type refusedArgs struct{}

// Kind names the job kind.
func (refusedArgs) Kind() string { return "k" }

// TestCompletesInTx: a handler that ends its jobs with ax.CompleteTxOf in
// a transaction type its store does not take is refused at registration
// when it says so (ax.CompletesInTx), by every registration path, with
// ax.ErrTxUnsupported naming the store and the type, and nothing is
// registered; with a type the store takes it registers. A handler that
// did not say so and calls CompleteTxOf with such a type fails its job
// after exactly one attempt (the error is permanent), with the error
// recorded and its Then job not written. On the old code (no option) the
// run-time case was retried until MaxAttempts: 3 attempts, not 1.
func TestCompletesInTx(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) store.Store
		// storeType is the store's %T; sqlTx and pgxTx: the transaction
		// types its CompleteTx takes.
		storeType    string
		sqlTx, pgxTx bool
	}{
		{"memstore", func(*testing.T) store.Store { return memstore.New() }, "*memstore.Store", false, false},
		{"sqlitestore", func(t *testing.T) store.Store {
			st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "ax.db"))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			return st
		}, "*sqlitestore.Store", true, false},
		{"pgstore", func(t *testing.T) store.Store {
			st, _ := axtest.Postgres(t)
			return st
		}, "*pgstore.Store", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s, err := ax.New(ax.Config{Store: tc.open(t), Logger: zap.NewNop()})
			require.NoError(t, err)
			t.Cleanup(func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, s.Stop(stopCtx))
			})

			t.Run("registration", func(t *testing.T) {
				for _, tx := range []struct {
					name  string
					opt   ax.HandlerOption
					taken bool
					// handleArgs registers with ax.HandleArgs, on a kind of
					// the type's own.
					handleArgs func(opts ...ax.HandlerOption) error
				}{
					{"*sql.Tx", ax.CompletesInTx[*sql.Tx](), tc.sqlTx, func(opts ...ax.HandlerOption) error {
						return ax.HandleArgs(s, func(context.Context, *ax.Job, txArgs[*sql.Tx]) error { return nil }, opts...)
					}},
					{"pgx.Tx", ax.CompletesInTx[pgx.Tx](), tc.pgxTx, func(opts ...ax.HandlerOption) error {
						return ax.HandleArgs(s, func(context.Context, *ax.Job, txArgs[pgx.Tx]) error { return nil }, opts...)
					}},
				} {
					for _, path := range []struct {
						name   string
						handle func(kind string, opts ...ax.HandlerOption) error
					}{
						{"Scheduler.Handle", func(kind string, opts ...ax.HandlerOption) error {
							return s.Handle(kind, ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }), opts...)
						}},
						{"Handle", func(kind string, opts ...ax.HandlerOption) error {
							return ax.Handle(s, kind, func(context.Context, *ax.Job, struct{}) error { return nil }, opts...)
						}},
						{"HandleResult", func(kind string, opts ...ax.HandlerOption) error {
							return ax.HandleResult(s, kind, func(context.Context, *ax.Job, struct{}) (int, error) { return 1, nil }, opts...)
						}},
						{"HandleArgs", func(_ string, opts ...ax.HandlerOption) error { return tx.handleArgs(opts...) }},
					} {
						t.Run(tx.name+"/"+path.name, func(t *testing.T) {
							kind := path.name + " " + tx.name
							err := path.handle(kind, ax.Timeout(time.Minute), tx.opt)
							if tx.taken {
								require.NoError(t, err)
								require.ErrorIs(t, path.handle(kind), ax.ErrDuplicateHandler, "registered")
								return
							}
							require.ErrorIs(t, err, ax.ErrTxUnsupported)
							require.ErrorContains(t, err, tc.storeType)
							require.ErrorContains(t, err, tx.name)
							require.NoError(t, path.handle(kind), "nothing registered: the kind registers without the option")
						})
					}
				}
			})

			t.Run("run time", func(t *testing.T) {
				for _, tx := range []struct {
					name     string
					taken    bool
					complete func(ctx context.Context) error
				}{
					{"*sql.Tx", tc.sqlTx, func(ctx context.Context) error { return ax.CompleteTxOf(ctx, s, (*sql.Tx)(nil)) }},
					{"pgx.Tx", tc.pgxTx, func(ctx context.Context) error { return s.CompleteTx(ctx, nil) }},
				} {
					if tx.taken {
						continue // TestCompleteTxOf and the store's tests run those
					}
					t.Run(tx.name, func(t *testing.T) {
						kind := "charge " + tx.name
						var calls int
						require.NoError(t, s.Handle(kind, ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
							calls++
							if err := ax.Then(ctx, "shipped "+tx.name, nil); err != nil {
								return err
							}
							if err := tx.complete(ctx); err != nil {
								return fmt.Errorf("charge %s: %w", j.ID, err)
							}
							return nil
						}), ax.MaxAttempts(3), ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return 0 }))))
						res, err := s.Schedule(ctx, kind, nil)
						require.NoError(t, err)

						n, err := s.RunDue(ctx)
						require.NoError(t, err)
						require.Equal(t, 1, n, "attempts run")
						require.Equal(t, 1, calls, "handler calls")
						job, err := s.Get(ctx, res.ID)
						require.NoError(t, err)
						require.Equal(t, ax.StateDead, job.State)
						require.Equal(t, 1, job.Attempt)
						require.Len(t, job.Errors, 1)
						require.Contains(t, job.Errors[0].Error, ax.ErrTxUnsupported.Error())
						require.Contains(t, job.Errors[0].Error, tc.storeType)
						require.Contains(t, job.Errors[0].Error, tx.name)
						jobs, err := s.Admin().Count(ctx, ax.JobFilter{Kinds: []string{"shipped " + tx.name}})
						if !errors.Is(err, errors.ErrUnsupported) {
							require.NoError(t, err)
							require.Zero(t, jobs, "the Then job of a failed attempt")
						}
					})
				}
			})
		})
	}
}

// txArgs is a JobArgs of a kind of Tx's own, for HandleArgs.
type txArgs[Tx any] struct{}

// Kind names the job kind after Tx.
func (txArgs[Tx]) Kind() string { return "HandleArgs " + reflect.TypeFor[Tx]().String() }
