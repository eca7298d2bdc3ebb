package pgstore_test

import (
	"sync"
	"testing"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/storetest"
)

// TestConformance runs the storetest suite, each subtest on a store of its
// own: a migrated, empty schema (pgtest.Schemas) in one database for the
// suite, with the subtests that make a store running in parallel.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, conformanceStores(t, func(t *testing.T, s *pgstore.Store) store.Store { return s }))
}

// TestConformanceEarlyDirectStart runs the suite's InsertClaimer tests on
// Stores with WithEarlyDirectStart, whose insert commits before it is
// flushed and hands the job to EarlyStart, which the suite passes.
func TestConformanceEarlyDirectStart(t *testing.T) {
	t.Parallel()
	storetest.RunInsertClaimer(t, conformanceStores(t, func(t *testing.T, s *pgstore.Store) store.Store { return s },
		pgstore.WithEarlyDirectStart()))
}

// conformanceStores returns the suite's store maker: each call makes a
// Store on an empty schema of its own, taken from one database for t
// (pgtest.Schemas), with opts, closed when the subtest ends, and wrapped
// by wrap. The subtest that makes a store is
// marked parallel (once, before the store is made): the suite's subtests
// share nothing but the database server, and a subtest mostly waits on it
// (round trips, commits, leases and clocks running out), so running them
// side by side takes a fraction of the time on any number of cores.
// Subtests that make no store (they share their parent's) stay sequential.
// The pool refuses uuid.UUID values (pgtest.StrictUUIDs): every ID the
// store sends or reads goes as [16]byte.
func conformanceStores(t *testing.T, wrap func(*testing.T, *pgstore.Store) store.Store, opts ...pgstore.Option) storetest.NewStoreFunc {
	schemas := pgtest.NewSchemas(t)
	var parallel sync.Map // *testing.T already marked parallel
	return func(t *testing.T) store.Store {
		if _, marked := parallel.LoadOrStore(t, true); !marked {
			t.Parallel()
		}
		pool, schema := schemas.Pool(t)
		// The schema is migrated already: New only checks its version.
		s, err := pgstore.New(ctxT(t), pool, append([]pgstore.Option{pgstore.WithSchema(schema), pgstore.WithoutMigrate()}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return wrap(t, s)
	}
}
