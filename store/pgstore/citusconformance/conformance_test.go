package citusconformance_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/internal/raceflag"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/storetest"
)

// raceShards returns the shard counts a test runs with: all of them, or,
// in a binary built with -race, only the last. CI runs this package
// twice, plainly and under -race; the race detector looks at the store's
// Go code, which the run with the most shards exercises most (claims
// across shards), and a second shard count under it added minutes of CI
// and nothing the plain run does not check.
func raceShards(counts ...int) []int {
	if raceflag.Enabled {
		return counts[len(counts)-1:]
	}
	return counts
}

// citusStores returns a storetest factory of CitusStores on one schema
// distributed over shards shards, emptied before each store: distributing
// a fresh schema per subtest would take most of the run. With a log, the
// stores' pool records every statement they run in it.
func citusStores(t *testing.T, shards int, log *statementLog) storetest.NewStoreFunc {
	pool, schema := citustest.Schema(t)
	// The stores' pool refuses uuid.UUID values (as every citustest
	// pool does: pgtest.StrictUUIDs), and records every statement in log
	// when there is one.
	storePool := citustest.PoolWith(t, citustest.URL(), func(cfg *pgxpool.Config) {
		if log != nil {
			cfg.ConnConfig.Tracer = log
		}
	})
	if err := pgstore.MigrateCitus(t.Context(), pool, pgstore.WithSchema(schema), pgstore.WithCitusShards(shards)); err != nil {
		t.Fatalf("MigrateCitus: %v", err)
	}
	// Every table but the schema's records of itself: the plain ones
	// truncated, the distributed ones emptied by DELETE (a TRUNCATE of a
	// distributed table locks every shard in turn: 0.66 s against 0.38 s
	// for the whole reset, for every one of the suite's stores).
	rows, _ := pool.Query(t.Context(), `SELECT
		coalesce(string_agg(format('%I.%I', schemaname, tablename), ', ') FILTER (WHERE p.logicalrelid IS NULL), ''),
		coalesce(string_agg(format('DELETE FROM %I.%I', schemaname, tablename), '; ') FILTER (WHERE p.logicalrelid IS NOT NULL), '')
		FROM pg_tables t
		LEFT JOIN pg_dist_partition p ON p.logicalrelid = format('%I.%I', schemaname, tablename)::regclass AND p.partmethod = 'h'
		WHERE schemaname = $1 AND tablename NOT IN ('schema_version', 'citus_slots', 'citus_steps')
		  AND tablename NOT LIKE 'jobs_history_%'`, schema)
	type reset struct{ Plain, Distributed string }
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[reset])
	if err != nil {
		t.Fatal(err)
	}
	tables := r.Plain
	return func(t *testing.T) store.Store {
		t.Helper()
		// The TRUNCATE locks the schema's Citus local table, and so
		// deadlocks with another test's DROP SCHEMA now and then.
		err := citustest.RetryDeadlocks(func() error {
			_, err := pool.Exec(t.Context(), `TRUNCATE `+tables+`; `+r.Distributed)
			return err
		})
		if err != nil {
			t.Fatalf("empty the schema: %v", err)
		}
		st, err := pgstore.NewCitus(t.Context(), storePool, pgstore.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		if st.Slots() != shards {
			t.Fatalf("the store has %d slots, want %d", st.Slots(), shards)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
}

// TestCitusConformance runs the conformance suite on the Citus store with
// one shard, where every order holds as on PostgreSQL, and with eight
// (only eight under -race: raceShards). The shard counts run side by
// side, each on a schema of its own, and beside TestCitusModel.
//
// The run with eight shards records every statement its stores send, and
// when the suite is done checks that Citus runs each on one shard, but
// those fansOut names (checkStatementsRoute): the check covers every
// statement the store runs, not a list of them kept by hand. Not under
// -race, whose run sends the same statements.
func TestCitusConformance(t *testing.T) {
	t.Parallel()
	for _, shards := range raceShards(1, 8) {
		t.Run(fmt.Sprintf("Shards%d", shards), func(t *testing.T) {
			t.Parallel()
			var log *statementLog
			if shards > 1 && !raceflag.Enabled {
				// The statements are the plain run's: under -race the
				// check would only repeat it (about 10 s).
				log = newStatementLog()
			}
			stores := citusStores(t, shards, log)
			if log != nil {
				// Cleanups run after the suite's parallel subtests end,
				// and this one before the schema's (registered first).
				t.Cleanup(func() { checkStatementsRoute(t, log, true) })
			}
			storetest.Run(t, stores)
		})
	}
}
