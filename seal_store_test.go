package ax_test

import (
	"testing"

	"github.com/axsched/ax/internal/sealtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestEncryptionAtRest runs the encryption cases on memstore; pgstore's
// and sqlitestore's tests run them on theirs.
func TestEncryptionAtRest(t *testing.T) {
	sealtest.Run(t, func(t *testing.T) store.Store {
		st := memstore.New()
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}
