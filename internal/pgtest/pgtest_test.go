package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/pgtest"
)

func TestFreshDatabases(t *testing.T) {
	var names []string
	t.Run("Create", func(t *testing.T) {
		for range 2 {
			pool := pgtest.Pool(t)
			var name string
			var tables int
			err := pool.QueryRow(context.Background(), `SELECT current_database(),
				(SELECT count(*) FROM pg_tables WHERE schemaname = 'ax' AND tablename = 'jobs')`).Scan(&name, &tables)
			if err != nil {
				t.Fatal(err)
			}
			if tables != 1 {
				t.Fatalf("database %s has no ax.jobs", name)
			}
			names = append(names, name)
		}
		if names[0] == names[1] {
			t.Fatalf("two tests share database %s", names[0])
		}
	})
	if len(names) < 2 {
		t.Skip("no databases were created (the subtest skipped: no PostgreSQL server)")
	}
	conn, err := pgx.Connect(context.Background(), pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = ANY($1)`, names).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d test databases left after cleanup", left)
	}
}
