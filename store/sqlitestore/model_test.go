package sqlitestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
	"github.com/axsched/ax/store/storetest"
)

// TestModel runs the model-based test against sqlitestore, on a clock
// moved by hand: leases lapse and unique windows turn when the model says.
// CompleteTx commits and rollbacks are among the operations.
func TestModel(t *testing.T) {
	storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
		clk := &manualClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
		st := newStore(t, sqlitestore.WithClock(clk.Now))
		return &storetest.ModelStore{Store: st, Advance: clk.Add, CompleteTx: completeTx(st)}
	}, storetest.ModelOptions{Seeds: 2, Steps: 300})
}

// completeTx applies an outcome with CompleteTx in a transaction of the
// store's writer and commits or rolls it back.
func completeTx(st *sqlitestore.Store) func(context.Context, store.FinishParams, bool) (bool, error) {
	return func(ctx context.Context, p store.FinishParams, commit bool) (bool, error) {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		ok, err := st.CompleteTx(ctx, tx, p)
		if err != nil || !commit {
			return ok, errors.Join(err, tx.Rollback())
		}
		return ok, tx.Commit()
	}
}
