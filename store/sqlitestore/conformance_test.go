package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
	"github.com/axsched/ax/store/storetest"
)

// newStore opens a Store on a fresh file and closes it after the test.
func newStore(t *testing.T, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "ax.db"), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// TestConformance runs the Store conformance suite, each store on a copy
// of a migrated file (newMigratedStore). A subtest that makes a store is
// marked parallel (once, before the store is made): each has a file of
// its own, and under -race the suite is bound by CPU (SQLite's
// translated C is instrumented too): one subtest at a time it used one
// core for 99 s, side by side 60 s on two. Subtests that make no store
// (they share their parent's) stay sequential.
func TestConformance(t *testing.T) {
	var parallel sync.Map // *testing.T already marked parallel
	storetest.Run(t, func(t *testing.T) store.Store {
		if _, marked := parallel.LoadOrStore(t, true); !marked {
			t.Parallel()
		}
		return newMigratedStore(t)
	})
}

// migrated is a store file migrated once, the start of every conformance
// store: the suite opens hundreds of stores, and under -race a fresh
// file's migrations took about 60 of the 160 ms of an open (a throwaway
// timing of 20 opens each way, 2026-12-06; the suite's race run went
// from 123 to 78 s). Open still checks the schema version of each copy,
// and the package's other tests start from empty files.
var migrated struct {
	once sync.Once
	data []byte
	err  error
}

// newMigratedStore opens a Store on a fresh copy of migrated and closes it
// after the test.
func newMigratedStore(t *testing.T) *sqlitestore.Store {
	t.Helper()
	migrated.once.Do(func() {
		dir, err := os.MkdirTemp("", "ax-sqlite-migrated-")
		if err != nil {
			migrated.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "ax.db")
		st, err := sqlitestore.Open(context.Background(), path)
		if err != nil {
			migrated.err = err
			return
		}
		if migrated.err = st.Close(); migrated.err == nil {
			migrated.data, migrated.err = os.ReadFile(path)
		}
	})
	require.NoError(t, migrated.err, "the migrated store file")
	path := filepath.Join(t.TempDir(), "ax.db")
	require.NoError(t, os.WriteFile(path, migrated.data, 0o600))
	st, err := sqlitestore.Open(t.Context(), path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}
