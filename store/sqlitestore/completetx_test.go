package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// TestCompleteTxOf: a handler ends its job with ax.CompleteTxOf on a
// *sql.Tx of the store, together with its own write. Committed, the job
// succeeds once with its result and its row exists; rolled back (the
// handler fails after CompleteTx), the job is retried and the row of the
// failed attempt does not exist. On the old code CompleteTxOf failed with
// ErrTxUnsupported ("transactional inserts") and the job was retried until
// dead.
func TestCompleteTxOf(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	_, err := st.DB().ExecContext(ctx, `CREATE TABLE charges (job TEXT NOT NULL, attempt INTEGER NOT NULL)`)
	require.NoError(t, err)

	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	var calls atomic.Int32
	require.NoError(t, s.Handle("charge", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		calls.Add(1)
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // no-op after Commit
		if _, err := tx.ExecContext(ctx, `INSERT INTO charges VALUES (?, ?)`, j.ID.String(), j.Attempt); err != nil {
			return err
		}
		if err := ax.RecordResult(ctx, map[string]int{"attempt": j.Attempt}); err != nil {
			return err
		}
		if err := ax.CompleteTxOf(ctx, s, tx); err != nil {
			return err
		}
		if j.Attempt == 1 && string(j.Payload) == `"fail-first"` {
			return errors.New("the commit is skipped: the attempt's write and success roll back")
		}
		return tx.Commit()
	}), ax.Retry(ax.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond})))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(stopCtx))
	})

	for _, tc := range []struct {
		payload  string
		attempts int
	}{
		{"once", 1},
		{"fail-first", 2},
	} {
		t.Run(tc.payload, func(t *testing.T) {
			calls.Store(0)
			res, err := s.Schedule(ctx, "charge", tc.payload)
			require.NoError(t, err)
			var job *ax.JobRecord
			require.Eventually(t, func() bool {
				job, err = s.Get(ctx, res.ID)
				return err == nil && job.State.Final()
			}, 15*time.Second, 10*time.Millisecond)
			require.Equal(t, ax.StateSucceeded, job.State, "errors: %v", job.Errors)
			require.Equal(t, tc.attempts, job.Attempt)
			require.JSONEq(t, `{"attempt": `+string(rune('0'+tc.attempts))+`}`, string(job.Result))
			require.Equal(t, int32(tc.attempts), calls.Load())
			var attempts []int
			rows, err := st.DB().QueryContext(ctx, `SELECT attempt FROM charges WHERE job = ?`, res.ID.String())
			require.NoError(t, err)
			defer rows.Close()
			for rows.Next() {
				var a int
				require.NoError(t, rows.Scan(&a))
				attempts = append(attempts, a)
			}
			require.NoError(t, rows.Err())
			require.Equal(t, []int{tc.attempts}, attempts, "only the committed attempt's write exists")
		})
	}
}

// TestCompleteTxLeaseLost: CompleteTx with a lease no longer held writes
// nothing and reports false; a nil transaction is invalid.
func TestCompleteTxLeaseLost(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	ok, err := st.CompleteTx(ctx, (*sql.Tx)(nil), finishOf(t, st))
	require.Error(t, err)
	require.False(t, ok)

	p := finishOf(t, st)
	p.Lease.Token[0] ^= 0xff // another attempt's lease
	tx, err := st.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	ok, err = st.CompleteTx(ctx, tx, p)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, tx.Rollback())
	rec, err := st.Get(ctx, p.Lease.ID)
	require.NoError(t, err)
	require.Equal(t, ax.StateRunning, rec.State)
}

// finishOf inserts and claims a job and returns the params of its success.
func finishOf(t *testing.T, st *sqlitestore.Store) store.FinishParams {
	t.Helper()
	p := job("pay", "", store.UniqueScope{})
	insertOne(t, st, p)
	res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "pay", Limit: 1}}, Limit: 1, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	return store.FinishParams{Lease: store.Lease{ID: p.ID, Token: res.Jobs[0].LeaseToken}, Outcome: store.OutcomeSucceeded}
}

// TestScheduleBatchTxOf: a batch scheduled in a *sql.Tx of the store
// exists only if the transaction commits.
func TestScheduleBatchTxOf(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	b := ax.Batch{Children: []ax.Request{{Kind: "part", Payload: 1}, {Kind: "part", Payload: 2}}, Completion: ax.Request{Kind: "all-done"}}

	tx, err := st.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	rolledBack, err := ax.ScheduleBatchTxOf(ctx, s, tx, b)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	_, err = s.Batch(ctx, rolledBack.ID)
	require.Error(t, err)
	_, err = s.Get(ctx, rolledBack.Children[0].ID)
	require.ErrorIs(t, err, ax.ErrNotFound)

	tx, err = st.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	committed, err := ax.ScheduleBatchTxOf(ctx, s, tx, b)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	status, err := s.Batch(ctx, committed.ID)
	require.NoError(t, err)
	require.Equal(t, 2, status.Total)
	for _, c := range committed.Children {
		rec, err := s.Get(ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, ax.StateScheduled, rec.State)
	}
}
