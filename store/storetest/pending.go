package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFlowPending checks the pending bounds of inserts: a kind's
// MaxPending and a row's PendingLimit (all kinds), refusing the whole
// call with a PendingLimitError, freed by claims, counting only pending
// jobs (not running or paused ones), and racing producers overshooting by
// at most one row each.
func testFlowPending(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	t.Run("KindBound", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fq", MaxPending: 5})
		insertN(t, st, "fq", 3)
		insertN(t, st, "fq.other", 10)
		_, err := st.Insert(t.Context(), []store.InsertParams{params(t, "fq"), params(t, "fq"), params(t, "fq")})
		var pl *store.PendingLimitError
		require.ErrorAs(t, err, &pl)
		require.ErrorIs(t, err, store.ErrPendingLimit)
		require.Equal(t, store.PendingLimitError{Kind: "fq", Pending: 3, Limit: 5}, *pl)
		require.Len(t, listKind(t, st, "fq", store.StateScheduled), 3, "nothing of the call was inserted")
		insertN(t, st, "fq", 2, notDue) // not yet due counts too: pending is scheduled and retrying
		_, err = st.Insert(t.Context(), []store.InsertParams{params(t, "fq")})
		require.ErrorAs(t, err, &pl)
		require.Equal(t, 5, pl.Pending)

		// A claim makes room; paused jobs are not pending.
		require.Len(t, claim(t, st, claimParams(2, longLease, "fq")).Jobs, 2)
		insertN(t, st, "fq", 2)
		require.ErrorIs(t, insertOneErr(t, st, "fq"), store.ErrPendingLimit)
		for _, j := range listKind(t, st, "fq", store.StateScheduled)[:1] {
			control(t, st, j.ID, store.OpPause)
		}
		insertN(t, st, "fq", 1)
	})
	t.Run("AllKinds", func(t *testing.T) {
		st := newStore(t)
		insertN(t, st, "fq.a", 3)
		insertN(t, st, "fq.b", 3)
		limited := func(kind string) store.InsertParams {
			return params(t, kind, func(p *store.InsertParams) { p.PendingLimit = 8 })
		}
		insert(t, st, limited("fq.a"), limited("fq.c"))
		_, err := st.Insert(t.Context(), []store.InsertParams{limited("fq.c")})
		var pl *store.PendingLimitError
		require.ErrorAs(t, err, &pl)
		require.Equal(t, store.PendingLimitError{Kind: "", Pending: 8, Limit: 8}, *pl)
		insertN(t, st, "fq.c", 1) // without a bound
	})
	t.Run("Racing", func(t *testing.T) {
		st := newStore(t)
		const (
			limit     = 50
			producers = 10
		)
		setFlows(t, st, store.FlowConfig{Kind: "fq", MaxPending: limit})
		var (
			wg      sync.WaitGroup
			refused atomic.Int64
			start   = make(chan struct{})
		)
		ctx := ctxTimeout(t)
		for range producers {
			wg.Go(func() {
				<-start
				for refused.Load() < 100 && ctx.Err() == nil {
					_, err := st.Insert(ctx, []store.InsertParams{params(t, "fq")})
					switch {
					case errors.Is(err, store.ErrPendingLimit):
						refused.Add(1)
					case err != nil:
						t.Errorf("insert: %v", err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		n := len(listKind(t, st, "fq", store.StateScheduled))
		require.GreaterOrEqual(t, n, limit)
		require.LessOrEqual(t, n, limit+producers, "racing producers overshoot by at most one row each")
	})
}

// insertOneErr inserts a due job of kind and returns the error.
func insertOneErr(t *testing.T, st store.Store, kind string) error {
	t.Helper()
	_, err := st.Insert(t.Context(), []store.InsertParams{params(t, kind)})
	return err
}
