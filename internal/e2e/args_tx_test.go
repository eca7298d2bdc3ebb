package e2e_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// invoiceArgs states its jobs' options: six attempts and a unique key
// from its ID.
type invoiceArgs struct {
	ID int `json:"id"`
}

func (invoiceArgs) Kind() string { return "invoice" }

func (a invoiceArgs) ScheduleOptions() []ax.ScheduleOption {
	return []ax.ScheduleOption{ax.MaxAttempts(6), ax.UniqueKey(fmt.Sprint("invoice:", a.ID))}
}

// TestTypedTx: EnqueueTx, EnqueueManyTx, ScheduleManyTx and
// ScheduleManyTxOf on a pgx.Tx: rolled back, no job exists; committed
// with the caller's write, all exist, with the type's options and the
// call's; scheduled again, all are duplicates of the first.
func TestTypedTx(t *testing.T) {
	invoices := func(ids []int) []invoiceArgs {
		args := make([]invoiceArgs, len(ids))
		for i, id := range ids {
			args[i] = invoiceArgs{ID: id}
		}
		return args
	}
	requests := func(ids []int) []ax.Request {
		reqs := make([]ax.Request, len(ids))
		for i, id := range ids {
			reqs[i] = ax.NewRequest(invoiceArgs{ID: id}, ax.Priority(ax.High))
		}
		return reqs
	}
	for _, tc := range []struct {
		name     string
		schedule func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, ids []int) ([]ax.ScheduleResult, error)
		jobs     int
	}{
		{"EnqueueTx", func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, ids []int) ([]ax.ScheduleResult, error) {
			r, err := ax.EnqueueTx(ctx, s, tx, invoiceArgs{ID: ids[0]}, ax.Priority(ax.High))
			return []ax.ScheduleResult{r}, err
		}, 1},
		{"EnqueueManyTx", func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, ids []int) ([]ax.ScheduleResult, error) {
			return ax.EnqueueManyTx(ctx, s, tx, invoices(ids), ax.Priority(ax.High))
		}, 3},
		{"ScheduleManyTx", func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, ids []int) ([]ax.ScheduleResult, error) {
			return s.ScheduleManyTx(ctx, tx, requests(ids))
		}, 3},
		{"ScheduleManyTxOf", func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, ids []int) ([]ax.ScheduleResult, error) {
			return ax.ScheduleManyTxOf(ctx, s, tx, requests(ids))
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, pool := newPG(t)
			s := newScheduler(t, st)
			ctx := t.Context()
			_, err := pool.Exec(ctx, `CREATE TABLE invoices (id int PRIMARY KEY)`)
			require.NoError(t, err)
			ids := []int{1, 2, 3}[:tc.jobs]
			inTx := func(commit bool) []ax.ScheduleResult {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
				res, err := tc.schedule(ctx, s, tx, ids)
				require.NoError(t, err)
				require.Len(t, res, tc.jobs)
				_, err = tx.Exec(ctx, `INSERT INTO invoices SELECT unnest($1::int[]) ON CONFLICT DO NOTHING`, ids)
				require.NoError(t, err)
				if commit {
					require.NoError(t, tx.Commit(ctx))
				}
				return res
			}

			for _, r := range inTx(false) {
				_, err := s.Get(ctx, r.ID)
				require.ErrorIs(t, err, ax.ErrNotFound, "a rolled-back job must not exist")
			}
			committed := inTx(true)
			for i, r := range committed {
				require.False(t, r.Duplicate)
				rec, err := s.Get(ctx, r.ID)
				require.NoError(t, err)
				require.Equal(t, ax.StateScheduled, rec.State)
				require.Equal(t, "invoice", rec.Kind)
				require.Equal(t, 6, rec.MaxAttempts, "the type's option")
				require.Equal(t, int(ax.High), rec.Priority, "the call's option")
				require.Equal(t, fmt.Sprint("invoice:", ids[i]), rec.UniqueKey)
			}
			again := inTx(true)
			for i, r := range again {
				require.Equal(t, ax.ScheduleResult{ID: committed[i].ID, Duplicate: true}, r, "the type's unique key holds")
			}
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n))
			require.Equal(t, tc.jobs, n)
		})
	}
}

// TestTypedTxOfAnotherType: a *sql.Tx given to pgstore, which takes a
// pgx.Tx, is refused at the call with ax.ErrTxUnsupported.
func TestTypedTxOfAnotherType(t *testing.T) {
	st, _ := newPG(t)
	s := newScheduler(t, st)
	ctx := t.Context()
	_, err := ax.EnqueueTx(ctx, s, (*sql.Tx)(nil), invoiceArgs{ID: 1})
	require.ErrorIs(t, err, ax.ErrTxUnsupported)
	_, err = ax.EnqueueManyTx(ctx, s, (*sql.Tx)(nil), []invoiceArgs{{ID: 1}})
	require.ErrorIs(t, err, ax.ErrTxUnsupported)
	_, err = ax.ScheduleManyTxOf(ctx, s, (*sql.Tx)(nil), []ax.Request{ax.NewRequest(invoiceArgs{ID: 1})})
	require.ErrorIs(t, err, ax.ErrTxUnsupported)
}

// BenchmarkEnqueueTx compares, on pgstore, a transaction that schedules
// 100 typed jobs in one EnqueueManyTx call with one that makes 100
// EnqueueTx calls (the only way before ScheduleManyTx). Each op is one
// committed transaction of 100 jobs.
func BenchmarkEnqueueTx(b *testing.B) {
	const jobs = 100
	for _, bc := range []struct {
		name     string
		schedule func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, args []invoiceArgs) error
	}{
		{"EnqueueManyTx", func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, args []invoiceArgs) error {
			_, err := ax.EnqueueManyTx(ctx, s, tx, args)
			return err
		}},
		{"EnqueueTx-each", func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, args []invoiceArgs) error {
			for _, a := range args {
				if _, err := ax.EnqueueTx(ctx, s, tx, a); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.Pool(b)
			st, err := pgstore.New(ctx, pool)
			require.NoError(b, err)
			b.Cleanup(func() { _ = st.Close() })
			s, err := ax.New(ax.Config{Store: st})
			require.NoError(b, err)
			args := make([]invoiceArgs, jobs)
			next := 0
			for b.Loop() {
				for i := range args {
					next++
					args[i] = invoiceArgs{ID: next}
				}
				require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					return bc.schedule(ctx, s, tx, args)
				}))
			}
			b.ReportMetric(float64(b.N*jobs)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
