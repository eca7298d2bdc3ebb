package sqlitestore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
)

// TestScheduler runs jobs through a Scheduler on the store: each runs to
// success once (a failing attempt is retried), and the unique-key scope
// options hold.
func TestScheduler(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		ok    = map[uuid.UUID]int{}
		tries = map[uuid.UUID]int{}
	)
	done := make(chan struct{}, 1000)
	require.NoError(t, s.Handle("work", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		mu.Lock()
		defer mu.Unlock()
		tries[j.ID]++
		if tries[j.ID] == 1 && j.Payload[1] == '1' {
			return errors.New("first attempt fails")
		}
		ok[j.ID]++
		done <- struct{}{}
		return nil
	}), ax.Retry(ax.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond})))
	require.NoError(t, s.Start(ctx))
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(stopCtx))
	}()

	reqs := make([]ax.Request, 200)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "work", Payload: []int{i % 2}}
	}
	res, err := s.ScheduleMany(ctx, reqs)
	require.NoError(t, err)
	for range reqs {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("jobs did not run")
		}
	}
	mu.Lock()
	for _, r := range res {
		require.Equal(t, 1, ok[r.ID], "job %s succeeded %d times", r.ID, ok[r.ID])
	}
	mu.Unlock()

	first, err := s.Schedule(ctx, "other", nil, ax.UniqueKey("k"), ax.UniqueFor(time.Hour), ax.In(time.Hour))
	require.NoError(t, err)
	again, err := s.Schedule(ctx, "other", nil, ax.UniqueKey("k"), ax.UniqueFor(time.Hour))
	require.NoError(t, err)
	require.Equal(t, ax.ScheduleResult{ID: first.ID, Duplicate: true}, again)
	elsewhere, err := s.Schedule(ctx, "third", nil, ax.UniqueKey("k"), ax.In(time.Hour))
	require.NoError(t, err)
	require.False(t, elsewhere.Duplicate, "keys are per kind by default")
	global, err := s.Schedule(ctx, "fourth", nil, ax.UniqueKey("k"), ax.UniqueGlobal(), ax.In(time.Hour))
	require.NoError(t, err)
	dup, err := s.Schedule(ctx, "fifth", nil, ax.UniqueKey("k"), ax.UniqueGlobal())
	require.NoError(t, err)
	require.Equal(t, ax.ScheduleResult{ID: global.ID, Duplicate: true}, dup, "a global key is held across kinds")
}

// TestScheduleTxOf: the core's generic ScheduleTxOf schedules inside a
// *sql.Tx of the store: a rolled-back job never exists, a committed one
// does, with the core's options applied.
func TestScheduleTxOf(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	tx, err := st.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	rolledBack, err := ax.ScheduleTxOf(ctx, s, tx, "invoice", map[string]int{"id": 1})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	_, err = s.Get(ctx, rolledBack.ID)
	require.ErrorIs(t, err, ax.ErrNotFound)

	tx, err = st.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	committed, err := ax.ScheduleTxOf(ctx, s, tx, "invoice", map[string]int{"id": 2}, ax.Priority(ax.High), ax.UniqueKey("invoice:2"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	rec, err := s.Get(ctx, committed.ID)
	require.NoError(t, err)
	require.Equal(t, ax.StateScheduled, rec.State)
	require.Equal(t, int(ax.High), rec.Priority)
	require.Equal(t, "invoice:2", rec.UniqueKey)

	_, err = s.ScheduleTx(ctx, nil, "invoice", nil)
	require.ErrorIs(t, err, ax.ErrTxUnsupported, "sqlitestore takes a *sql.Tx, not a pgx.Tx")
}
