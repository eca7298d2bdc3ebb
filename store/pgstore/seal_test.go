package pgstore_test

import (
	"testing"

	"github.com/axsched/ax/internal/sealtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestEncryptionAtRest runs the encryption-at-rest cases (ax.Config.Keys)
// on pgstore, each on a schema of its own.
func TestEncryptionAtRest(t *testing.T) {
	t.Parallel()
	sealtest.Run(t, conformanceStores(t, func(t *testing.T, s *pgstore.Store) store.Store { return s }))
}
