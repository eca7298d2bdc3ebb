package ax_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
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

// batchesWithoutResealer keeps batches (store.BatchStore) and re-seals
// jobs, but cannot list or re-seal its batches' completion templates
// (no store.BatchResealer), as a store written before it could.
type batchesWithoutResealer struct {
	store.Store
	store.JobInspector
	store.Resealer
	store.BatchStore
	store.PeriodicController
}

// TestKeysWithoutBatchResealer: on a store that keeps batches without
// store.BatchResealer, Reencrypt, KeyUsage, KeyUses and CheckKeyRemoval
// refuse with errors.ErrUnsupported rather than miss the completion jobs
// of running batches, and a store that keeps no batches is not refused.
func TestKeysWithoutBatchResealer(t *testing.T) {
	ring := sealtest.Ring(t, mustKey(t, "k2"), mustKey(t, "k1"))
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	cases := []struct {
		name        string
		st          store.Store
		unsupported bool
	}{
		{"BatchesWithoutResealer", batchesWithoutResealer{mem, mem, mem, mem, mem}, true},
		{"NoBatches", struct {
			store.Store
			store.JobInspector
			store.Resealer
		}{mem, mem, mem}, false},
		{"Memstore", mem, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := ax.NewAdmin(ax.AdminConfig{Store: c.st, Keys: ring, Logger: zap.NewNop()})
			require.NoError(t, err)
			calls := map[string]func() error{
				"Reencrypt":       func() error { _, err := a.Reencrypt(t.Context(), ax.ReencryptOptions{}); return err },
				"KeyUsage":        func() error { _, _, err := a.KeyUsage(t.Context()); return err },
				"KeyUses":         func() error { _, err := a.KeyUses(t.Context()); return err },
				"CheckKeyRemoval": func() error { return a.CheckKeyRemoval(t.Context(), "k1") },
			}
			for name, call := range calls {
				err := call()
				if !c.unsupported {
					require.NoError(t, err, name)
					continue
				}
				require.ErrorIs(t, err, errors.ErrUnsupported, name)
				require.Contains(t, err.Error(), "store.BatchResealer", name)
			}
		})
	}
}

// mustKey returns a new key named id.
func mustKey(t *testing.T, id string) ax.Key {
	t.Helper()
	k, err := ax.GenerateKey(id)
	require.NoError(t, err)
	return k
}
