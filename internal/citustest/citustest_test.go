package citustest_test

import (
	"context"
	"testing"

	"github.com/axsched/ax/internal/citustest"
)

// TestSchema checks that two tests get two schemas of the coordinator's
// database, that a table distributed in one lands on the workers, and
// that both schemas are gone when their tests end.
func TestSchema(t *testing.T) {
	ctx := context.Background()
	var names []string
	t.Run("Create", func(t *testing.T) {
		for range 2 {
			pool, name := citustest.Schema(t)
			if _, err := pool.Exec(ctx, `CREATE TABLE `+name+`.t (k int PRIMARY KEY);
				SELECT create_distributed_table('`+name+`.t', 'k')`); err != nil {
				t.Fatal(err)
			}
			var nodes int
			err := pool.QueryRow(ctx, `SELECT count(DISTINCT nodeport) FROM citus_shards
				WHERE table_name = $1::regclass`, name+".t").Scan(&nodes)
			if err != nil {
				t.Fatal(err)
			}
			if want := len(citustest.WorkerURLs(t)); nodes != want {
				t.Fatalf("table of schema %s has shards on %d nodes, want %d (every worker)", name, nodes, want)
			}
			names = append(names, name)
		}
		if names[0] == names[1] {
			t.Fatalf("two tests share schema %s", names[0])
		}
	})
	if len(names) < 2 {
		t.Skip("no schemas were created (the subtest skipped: no Citus coordinator)")
	}
	var left int
	err := citustest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)`, names).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d test schemas left after cleanup", left)
	}
}
