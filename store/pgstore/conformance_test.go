package pgstore_test

import (
	"testing"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/storetest"
)

// TestConformance runs the storetest suite, each subtest on a fresh database.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t) })
}
