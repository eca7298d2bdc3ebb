package sqlitestore_test

import (
	"testing"

	"github.com/axsched/ax/internal/sealtest"
	"github.com/axsched/ax/store"
)

// TestEncryptionAtRest runs the encryption-at-rest cases (ax.Config.Keys)
// on sqlitestore.
func TestEncryptionAtRest(t *testing.T) {
	sealtest.Run(t, func(t *testing.T) store.Store { return newStore(t) })
}
