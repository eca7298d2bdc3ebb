package pgtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
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

// TestSchemas checks that a schema a test gave back is handed to the next
// test empty and indistinguishable from a newly migrated one: rows of the
// jobs, history, kind, leader and node tables and a history partition made
// by the first test are gone, and its catalog is a new schema's.
func TestSchemas(t *testing.T) {
	ctx := context.Background()
	schemas := pgtest.NewSchemas(t)
	var first string
	t.Run("Fill", func(t *testing.T) {
		pool, name := schemas.Pool(t)
		first = name
		st, err := pgstore.New(ctx, pool, pgstore.WithSchema(name))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		id := uuid.Must(uuid.NewV7())
		if _, err := st.Insert(ctx, []store.InsertParams{{ID: id, Kind: "k", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Insert(ctx, []store.InsertParams{{ID: uuid.Must(uuid.NewV7()), Kind: "k", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Control(ctx, id, store.OpCancel); err != nil {
			t.Fatal(err)
		}
		if n, err := st.Archive(ctx, 10); err != nil || n != 1 {
			t.Fatalf("archive: moved %d, %v; want 1", n, err)
		}
		if _, err := st.SetKindPaused(ctx, "k", true); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AcquireLeader(ctx, &store.LeaderParams{Name: "l", Holder: "h", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := st.HeartbeatNode(ctx, &store.NodeParams{Name: "n", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if got := rowCount(t, pool, name); got < 5 {
			t.Fatalf("%d rows written, want at least 5", got)
		}
	})
	if first == "" {
		t.Skip("no schema was handed out (the subtest skipped: no PostgreSQL server)")
	}
	t.Run("Reuse", func(t *testing.T) {
		pool, name := schemas.Pool(t)
		if name != first {
			t.Fatalf("got schema %s, want %s given back by the previous test", name, first)
		}
		if got := rowCount(t, pool, name); got != 0 {
			t.Fatalf("%d rows left in the reused schema", got)
		}
		// A second schema is new: compare the catalogs.
		_, fresh := schemas.Pool(t)
		if got, want := catalog(t, pool, name), catalog(t, pool, fresh); got != want {
			t.Fatalf("reused schema %s differs from new schema %s:\n%s\nwant:\n%s", name, fresh, got, want)
		}
	})
}

// rowCount returns the number of rows in the tables of schema, but
// schema_version.
func rowCount(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname <> 'schema_version'`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, tb := range tables {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tb).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// catalog describes the relations, columns, constraints, triggers and
// functions of schema, with the schema's name replaced by "S".
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT c.relname || ' ' || c.relkind::text || ' ' || c.relispartition::text FROM pg_class c
		 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1`,
		`SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
		 FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`,
		`SELECT conname || ' ' || pg_get_constraintdef(c.oid) FROM pg_constraint c
		 JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 ORDER BY 1`,
		`SELECT pg_get_triggerdef(g.oid) FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
		 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT g.tgisinternal ORDER BY 1`,
		`SELECT p.proname || ' ' || md5(p.prosrc) FROM pg_proc p
		 JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`,
		`SELECT version || ' ' || name FROM ` + pgx.Identifier{schema, "schema_version"}.Sanitize() + ` ORDER BY version`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, schema)
		}
		rows, err := pool.Query(context.Background(), q, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			b.WriteString(strings.ReplaceAll(l, schema, "S") + "\n")
		}
	}
	return b.String()
}
