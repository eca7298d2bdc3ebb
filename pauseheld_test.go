package ax

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestPauseHandsBackHeldAttempt: a job claimed ahead of its run time waits
// on this host for that time; when its kind is paused here meanwhile, its
// handler must not start (no attempt of a kind paused here starts here
// from the pause on): the job goes back to the store unstarted and the
// worker slot is free again.
func TestPauseHandsBackHeldAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		r := testRuntime(t, st)
		ran := make(chan struct{}, 1)
		require.NoError(t, r.s.Handle("k", HandlerFunc(func(context.Context, *Job) error {
			ran <- struct{}{}
			return nil
		})))
		ctx := t.Context()
		r.holds.start()
		defer r.holds.stop()
		go r.completer.run()
		defer func() { _ = r.completer.stop(ctx, ctx) }()
		id := uuid.Must(uuid.NewV7())
		_, err := st.Insert(ctx, []store.InsertParams{{ID: id, Kind: "k", Payload: []byte(`{}`), Priority: store.PriorityNormal,
			MaxAttempts: 3, Delay: 500 * time.Millisecond}})
		require.NoError(t, err)
		res, err := st.Claim(ctx, &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: "k", Limit: 1}}, Limit: 1,
			LeaseDuration: time.Minute, Ahead: time.Second})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)

		r.launch(res.Jobs[0], time.Now(), time.Now().Add(time.Second))
		synctest.Wait() // held until its start
		r.pauses.apply("k", true)
		time.Sleep(2 * time.Second)
		synctest.Wait()

		select {
		case <-ran:
			t.Fatal("the handler of a kind paused here started")
		default:
		}
		rec, err := st.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateScheduled, rec.State)
		require.Zero(t, rec.Attempt)
		r.mu.Lock()
		require.Equal(t, r.cfg.Workers, r.free)
		require.Empty(t, r.attempts)
		r.mu.Unlock()
	})
}
