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

// TestReadRouting: the parts of a Citus EXPLAIN that say how a statement
// runs, and their wording.
func TestReadRouting(t *testing.T) {
	for _, c := range []struct {
		name, plan  string
		all, others string
	}{
		{"router", "Custom Scan (Citus Adaptive)\n  Task Count: 1\n  Tasks Shown: All", "tasks: 1", ""},
		{"every shard", "Custom Scan (Citus Adaptive)\n  Task Count: 8\n  Tasks Shown: One of 8", "tasks: 8", "tasks: 8"},
		{"subplans", "Custom Scan (Citus Adaptive)\n  ->  Distributed Subplan 1_1\n  Task Count: 8\n  Task Count: 1", "subplans, tasks: 8, tasks: 1", "subplans, tasks: 8"},
		{"pulled", "Custom Scan (Citus INSERT ... SELECT)\n  INSERT/SELECT method: pull to coordinator\n  Task Count: 2", "pulled to the coordinator, tasks: 2", "pulled to the coordinator, tasks: 2"},
		{"coordinator only", "Seq Scan on t", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := citustest.ReadRouting(c.plan)
			if got := r.Verdict(true); got != c.all {
				t.Errorf("Verdict(true) = %q, want %q", got, c.all)
			}
			if got := r.Verdict(false); got != c.others {
				t.Errorf("Verdict(false) = %q, want %q", got, c.others)
			}
		})
	}
}
