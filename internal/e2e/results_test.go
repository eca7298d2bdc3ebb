package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// waitState polls Get until job id is in state want (or fails the test
// after timeout). Polling is what a client of the database can do; the
// jobs here end within milliseconds of being due.
func waitState(t *testing.T, s *ax.Scheduler, id uuid.UUID, want ax.State, timeout time.Duration) *ax.JobRecord {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rec, err := s.Get(t.Context(), id)
		if err == nil && rec.State == want {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not %s after %s (last: %+v, %v)", id, want, timeout, rec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPGResults: on PostgreSQL, a typed handler's result round-trips
// through Get byte for byte as encoded; a failed attempt keeps a partial
// result; a result over store.MaxResultSize fails the attempt with
// ErrInvalidResult (the host carries on and runs the next job); Then jobs
// follow a success only.
func TestPGResults(t *testing.T) {
	st, _ := newPG(t)
	s := newScheduler(t, st)
	require.NoError(t, ax.HandleResult(s, "thumb", func(_ context.Context, _ *ax.Job, n int) (map[string]any, error) {
		return map[string]any{"url": "https://cdn.example/t.png", "bytes": n, "unicode": "é\u2028"}, nil
	}))
	require.NoError(t, s.Handle("partial", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
		if err := ax.RecordResult(ctx, map[string]int{"done": 7}); err != nil {
			return err
		}
		return errors.New("stopped half way")
	}), ax.MaxAttempts(1)))
	require.NoError(t, ax.HandleResult(s, "huge", func(context.Context, *ax.Job, struct{}) (string, error) {
		return strings.Repeat("x", store.MaxResultSize), nil
	}, ax.MaxAttempts(1)))
	require.NoError(t, s.Handle("chain", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		if err := ax.Then(ctx, "next", map[string]int{"step": 2}); err != nil {
			return err
		}
		if j.Attempt == 1 {
			return errors.New("first attempt fails: its Then is dropped")
		}
		return nil
	}), ax.Retry(ax.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond})))
	nexts := make(chan *ax.Job, 4)
	require.NoError(t, s.Handle("next", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		nexts <- j
		return nil
	})))
	require.NoError(t, s.Start(t.Context()))
	ctx := t.Context()

	thumb, err := s.Schedule(ctx, "thumb", 200)
	require.NoError(t, err)
	partial, err := s.Schedule(ctx, "partial", nil)
	require.NoError(t, err)
	huge, err := s.Schedule(ctx, "huge", struct{}{})
	require.NoError(t, err)
	chain, err := s.Schedule(ctx, "chain", nil)
	require.NoError(t, err)

	rec := waitState(t, s, thumb.ID, ax.StateSucceeded, 10*time.Second)
	want, err := json.Marshal(map[string]any{"url": "https://cdn.example/t.png", "bytes": 200, "unicode": "é\u2028"})
	require.NoError(t, err)
	require.Equal(t, string(want), string(rec.Result), "result not kept byte for byte")

	rec = waitState(t, s, partial.ID, ax.StateDead, 10*time.Second)
	require.JSONEq(t, `{"done":7}`, string(rec.Result), "a failed attempt keeps its partial result")

	rec = waitState(t, s, huge.ID, ax.StateDead, 10*time.Second)
	require.Len(t, rec.Errors, 1)
	require.Contains(t, rec.Errors[0].Error, ax.ErrInvalidResult.Error())
	require.Contains(t, rec.Errors[0].Error, "more than 262144")
	require.Nil(t, rec.Result)

	waitState(t, s, chain.ID, ax.StateSucceeded, 10*time.Second)
	select {
	case j := <-nexts:
		require.Equal(t, chain.ID, j.Parent)
		require.JSONEq(t, `{"step":2}`, string(j.Payload))
	case <-time.After(10 * time.Second):
		t.Fatal("the Then job did not run")
	}
	ups, err := st.FollowUps(ctx, chain.ID)
	require.NoError(t, err)
	require.Len(t, ups, 1, "one Then job: the failed attempt's was not inserted")

	// The host is still healthy: it runs the next job.
	again, err := s.Schedule(ctx, "thumb", 3)
	require.NoError(t, err)
	waitState(t, s, again.ID, ax.StateSucceeded, 10*time.Second)
}

// TestPGCompleteTx: a handler's business write and its job's success
// commit together in CompleteTx's transaction; a transaction that rolls
// back after CompleteTx leaves neither, and the job runs again.
func TestPGCompleteTx(t *testing.T) {
	st, pool := newPG(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE orders (job_id uuid NOT NULL, attempt int NOT NULL)`)
	require.NoError(t, err)
	s := newScheduler(t, st)
	require.NoError(t, s.Handle("order", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2)`, [16]byte(j.ID), j.Attempt); err != nil {
			return err
		}
		if err := ax.RecordResult(ctx, map[string]int{"attempt": j.Attempt}); err != nil {
			return err
		}
		if err := s.CompleteTx(ctx, tx); err != nil {
			return err
		}
		if j.Attempt == 1 {
			return nil // returns without committing: rolled back by the defer
		}
		return tx.Commit(ctx)
	}), ax.Retry(ax.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond})))
	require.NoError(t, s.Start(t.Context()))

	res, err := s.Schedule(t.Context(), "order", nil)
	require.NoError(t, err)
	rec := waitState(t, s, res.ID, ax.StateSucceeded, 10*time.Second)
	require.Equal(t, 2, rec.Attempt, "the attempt whose transaction rolled back was retried")
	require.JSONEq(t, `{"attempt":2}`, string(rec.Result))
	require.Len(t, rec.Errors, 1)
	var rows []int
	r, err := pool.Query(t.Context(), `SELECT attempt FROM orders WHERE job_id = $1`, [16]byte(res.ID))
	require.NoError(t, err)
	rows, err = pgx.CollectRows(r, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2}, rows, "only the committed attempt's write exists")
}

// TestPGBatchInTx: ScheduleBatchTx stores a batch only when the caller's
// transaction commits; its completion job runs once every child ended,
// dead ones included, and reads their results.
func TestPGBatchInTx(t *testing.T) {
	st, pool := newPG(t)
	s := newScheduler(t, st, func(c *ax.Config) { c.Workers = 20 })
	require.NoError(t, ax.HandleResult(s, "square", func(_ context.Context, _ *ax.Job, n int) (int, error) {
		if n%10 == 0 {
			return 0, ax.Permanent(errors.New("no round numbers"))
		}
		return n * n, nil
	}))
	type summary struct{ ok, dead, sum int }
	done := make(chan summary, 2)
	require.NoError(t, s.Handle("sum", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		var sm summary
		after := uuid.Nil
		for {
			page, err := s.BatchChildren(ctx, j.Batch, after, 50)
			if err != nil {
				return err
			}
			for _, c := range page {
				switch c.State {
				case ax.StateSucceeded:
					var v int
					if err := json.Unmarshal(c.Result, &v); err != nil {
						return err
					}
					sm.ok++
					sm.sum += v
				case ax.StateDead:
					sm.dead++
				}
			}
			if len(page) < 50 {
				break
			}
			after = page[len(page)-1].ID
		}
		done <- sm
		return nil
	})))
	require.NoError(t, s.Start(t.Context()))

	batch := func() (ax.Batch, int) {
		var b ax.Batch
		want := 0
		for i := 1; i <= 200; i++ {
			b.Children = append(b.Children, ax.Request{Kind: "square", Payload: i})
			if i%10 != 0 {
				want += i * i
			}
		}
		b.Completion = ax.Request{Kind: "sum"}
		return b, want
	}
	// Rolled back: nothing of it exists.
	b, _ := batch()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	gone, err := s.ScheduleBatchTx(t.Context(), tx, b)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(t.Context()))
	_, err = s.Batch(t.Context(), gone.ID)
	require.ErrorIs(t, err, ax.ErrNotFound)

	b, want := batch()
	tx, err = pool.Begin(t.Context())
	require.NoError(t, err)
	res, err := s.ScheduleBatchTx(t.Context(), tx, b)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	select {
	case sm := <-done:
		require.Equal(t, summary{ok: 180, dead: 20, sum: want}, sm)
	case <-time.After(30 * time.Second):
		t.Fatal("the completion job did not run")
	}
	rec := waitState(t, s, res.Completion, ax.StateSucceeded, 10*time.Second)
	require.Equal(t, res.ID, rec.Batch)
	status, err := s.Batch(t.Context(), res.ID)
	require.NoError(t, err)
	require.True(t, status.Completed)
	require.Equal(t, []int{200, 180, 20, 0}, []int{status.Total, status.Succeeded, status.Dead, status.Pending})
	select {
	case <-done:
		t.Fatal("the completion job ran twice")
	default:
	}
}
