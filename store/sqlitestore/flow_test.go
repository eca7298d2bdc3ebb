package sqlitestore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// TestSchedulerFlow: a Scheduler on the embedded store takes the flow
// options the README lists (on the old code Handle refused them with
// errors.ErrUnsupported) and the store applies them: at most 2 jobs of a
// GlobalConcurrency(2) kind run at once, a RateLimit kind runs, and the
// jobs of a Sequential key run one at a time in their order.
func TestSchedulerFlow(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), PollInterval: 20 * time.Millisecond, Workers: 8})
	require.NoError(t, err)

	var (
		mu            sync.Mutex
		running, peak int
		order         []int
	)
	done := make(chan struct{}, 100)
	limited := ax.HandlerFunc(func(context.Context, *ax.Job) error {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	require.NoError(t, s.Handle("limited", limited, ax.GlobalConcurrency(2)))
	require.NoError(t, s.Handle("rated", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		done <- struct{}{}
		return nil
	}), ax.RateLimit(1000, time.Second)))
	require.NoError(t, s.Handle("seq", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		mu.Lock()
		order = append(order, int(j.Payload[0]-'0'))
		mu.Unlock()
		done <- struct{}{}
		return nil
	})))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(stopCtx))
	})

	n := 0
	for i := range 10 {
		_, err := s.Schedule(ctx, "limited", nil)
		require.NoError(t, err)
		_, err = s.Schedule(ctx, "rated", nil)
		require.NoError(t, err)
		_, err = s.Schedule(ctx, "seq", i, ax.Sequential("account-1"))
		require.NoError(t, err)
		n += 3
	}
	for range n {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("jobs did not run")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, peak, 2, "GlobalConcurrency(2)")
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, order, "Sequential: one at a time, in order")
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st})
	require.NoError(t, err)
	flows, err := admin.Flows(ctx)
	require.NoError(t, err)
	require.Len(t, flows, 2)
}

// TestFollowUpKeepsSequence: a follow-up's template keeps its sequence
// key, as memstore and pgstore keep the whole InsertParams: the job it
// inserts is one of the sequence. (The stored templates dropped it.)
func TestFollowUpKeepsSequence(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	next := job("next", "", store.UniqueScope{})
	next.SequenceKey = "account-1"
	parent := job("parent", "", store.UniqueScope{})
	parent.FollowUps = []store.FollowUp{{On: []store.State{store.StateSucceeded}, Job: next}}
	insertOne(t, st, parent)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "parent", Limit: 1}}, Limit: 1, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	ok, err := st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: parent.ID, Token: res.Jobs[0].LeaseToken}, Outcome: store.OutcomeSucceeded}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	fus, err := st.FollowUps(ctx, parent.ID)
	require.NoError(t, err)
	require.Len(t, fus, 1)
	require.Equal(t, "account-1", fus[0].SequenceKey)
}
