package memstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/storetest"
)

// TestModel runs the model-based test against memstore, on a clock moved
// by hand (leases lapse and unique windows turn when the model says) and
// on real time.
func TestModel(t *testing.T) {
	t.Run("ManualClock", func(t *testing.T) {
		storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
			clk := newFakeClock()
			st := memstore.New(memstore.WithClock(clk.Now))
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			return &storetest.ModelStore{Store: st, Advance: clk.Add}
		}, storetest.ModelOptions{Seeds: 4, Steps: 400})
	})
	t.Run("RealClock", func(t *testing.T) {
		storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
			st := memstore.New()
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			return &storetest.ModelStore{Store: st}
		}, storetest.ModelOptions{Seeds: 2, Steps: 300})
	})
}
