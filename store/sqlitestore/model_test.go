package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/axsched/ax/store/sqlitestore"
	"github.com/axsched/ax/store/storetest"
)

// TestModel runs the model-based test against sqlitestore, on a clock
// moved by hand: leases lapse and unique windows turn when the model says.
func TestModel(t *testing.T) {
	storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
		clk := &manualClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
		return &storetest.ModelStore{Store: newStore(t, sqlitestore.WithClock(clk.Now)), Advance: clk.Add}
	}, storetest.ModelOptions{Seeds: 2, Steps: 300})
}
