package memstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/storetest"
)

// TestConformance runs the Store conformance suite against memstore.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		st := memstore.New()
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		return st
	})
}
