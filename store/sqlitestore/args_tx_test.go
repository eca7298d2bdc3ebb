package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/sqlitestore"
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

// TestTypedTx: EnqueueTx, EnqueueManyTx and ScheduleManyTxOf on a *sql.Tx
// of the store: rolled back, no job exists; committed with the caller's
// write, all exist, with the type's options and the call's; scheduled
// again, all are duplicates of the first.
func TestTypedTx(t *testing.T) {
	for _, tc := range []struct {
		name     string
		schedule func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, ids []int) ([]ax.ScheduleResult, error)
		jobs     int
	}{
		{"EnqueueTx", func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, ids []int) ([]ax.ScheduleResult, error) {
			r, err := ax.EnqueueTx(ctx, s, tx, invoiceArgs{ID: ids[0]}, ax.Priority(ax.High))
			return []ax.ScheduleResult{r}, err
		}, 1},
		{"EnqueueManyTx", func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, ids []int) ([]ax.ScheduleResult, error) {
			args := make([]invoiceArgs, len(ids))
			for i, id := range ids {
				args[i] = invoiceArgs{ID: id}
			}
			return ax.EnqueueManyTx(ctx, s, tx, args, ax.Priority(ax.High))
		}, 3},
		{"ScheduleManyTxOf", func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, ids []int) ([]ax.ScheduleResult, error) {
			reqs := make([]ax.Request, len(ids))
			for i, id := range ids {
				reqs[i] = ax.NewRequest(invoiceArgs{ID: id}, ax.Priority(ax.High))
			}
			return ax.ScheduleManyTxOf(ctx, s, tx, reqs)
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t)
			ctx := t.Context()
			_, err := st.DB().ExecContext(ctx, `CREATE TABLE invoices (id INTEGER PRIMARY KEY)`)
			require.NoError(t, err)
			s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
			ids := []int{1, 2, 3}[:tc.jobs]
			inTx := func(commit bool) []ax.ScheduleResult {
				tx, err := st.DB().BeginTx(ctx, nil)
				require.NoError(t, err)
				defer tx.Rollback() //nolint:errcheck // no-op after Commit
				res, err := tc.schedule(ctx, s, tx, ids)
				require.NoError(t, err)
				require.Len(t, res, tc.jobs)
				if commit {
					require.NoError(t, tx.Commit())
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
		})
	}
}

// payArgs and shipArgs are the steps of an order: the payment's handler
// charges in its transaction and adds the shipment with ThenArgs.
type payArgs struct {
	Order int `json:"order"`
}

func (payArgs) Kind() string { return "order.pay" }

type shipArgs struct {
	Order int `json:"order"`
}

func (shipArgs) Kind() string                         { return "order.ship" }
func (shipArgs) ScheduleOptions() []ax.ScheduleOption { return []ax.ScheduleOption{ax.In(time.Hour)} }

// TestCompleteTxThenArgs: a handler writes, adds a typed Then job and
// ends its job with CompleteTxOf in one *sql.Tx; its first attempt fails
// after CompleteTx, so that transaction rolls back. The order's write and
// its shipment job exist once each, from the attempt that committed.
func TestCompleteTxThenArgs(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	_, err := st.DB().ExecContext(ctx, `CREATE TABLE payments (ord INTEGER NOT NULL, attempt INTEGER NOT NULL)`)
	require.NoError(t, err)
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, a payArgs) error {
		return pay(ctx, s, st, j, a)
	}, ax.Retry(ax.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond})))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(stopCtx))
	})

	res, err := ax.Enqueue(ctx, s, payArgs{Order: 7})
	require.NoError(t, err)
	var job *ax.JobRecord
	require.Eventually(t, func() bool {
		job, err = s.Get(ctx, res.ID)
		return err == nil && job.State.Final()
	}, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, ax.StateSucceeded, job.State, "errors: %v", job.Errors)
	require.Equal(t, 2, job.Attempt)

	var attempts []int
	rows, err := st.DB().QueryContext(ctx, `SELECT attempt FROM payments WHERE ord = 7`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var a int
		require.NoError(t, rows.Scan(&a))
		attempts = append(attempts, a)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{2}, attempts, "only the committed attempt's write exists")
	list, err := s.Admin().List(ctx, ax.ListOptions{Filter: ax.JobFilter{Kinds: []string{"order.ship"}}})
	require.NoError(t, err)
	require.Len(t, list.Jobs, 1, "one shipment, from the committed attempt")
	require.Equal(t, res.ID, list.Jobs[0].Parent)
	require.JSONEq(t, `{"order":7}`, string(list.Jobs[0].Payload))
}

// pay is TestCompleteTxThenArgs's handler.
func pay(ctx context.Context, s *ax.Scheduler, st *sqlitestore.Store, j *ax.Job, a payArgs) error {
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO payments VALUES (?, ?)`, a.Order, j.Attempt); err != nil {
		return err
	}
	if err := ax.ThenArgs(ctx, shipArgs(a)); err != nil {
		return err
	}
	if err := ax.CompleteTxOf(ctx, s, tx); err != nil {
		return err
	}
	if j.Attempt == 1 {
		return errors.New("the commit is skipped: the payment, the success and the shipment roll back")
	}
	return tx.Commit()
}

// TestTypedTxOfAnotherType: a pgx.Tx given to sqlitestore, which takes a
// *sql.Tx, is refused at the call with ax.ErrTxUnsupported, nothing
// stored.
func TestTypedTxOfAnotherType(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	for _, call := range []func() error{
		func() error { _, err := ax.EnqueueTx(ctx, s, pgx.Tx(nil), invoiceArgs{ID: 1}); return err },
		func() error { _, err := ax.EnqueueManyTx(ctx, s, pgx.Tx(nil), []invoiceArgs{{ID: 1}}); return err },
		func() error {
			_, err := s.ScheduleManyTx(ctx, nil, []ax.Request{ax.NewRequest(invoiceArgs{ID: 1})})
			return err
		},
	} {
		require.ErrorIs(t, call(), ax.ErrTxUnsupported)
	}
	n, err := s.Admin().Count(ctx, ax.JobFilter{})
	require.NoError(t, err)
	require.Zero(t, n)
}
