package pgtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store/pgstore"
)

// Schemas hands out empty, migrated pgstore schemas of one database, for
// suites that need a fresh store per subtest by the hundred (the storetest
// conformance suite). A fresh database per subtest costs its CREATE and DROP
// DATABASE, about a second each on a loaded machine; migrating a new schema
// about half a second; emptying a schema a test gave back costs one round
// trip. So a schema is migrated only when none is free, and a test's schema
// is emptied when the test ends and handed to the next one. The tests share
// one pool of up to 16 connections, so that the server's connections are
// not spent on idle ones (a pool per schema ran a shared server out of
// them: "sorry, too many clients already").
//
// Emptying puts the schema back in the state Migrate leaves: every row of
// every table deleted (schema_version kept), and every table the test
// created (the history's day partitions) dropped. Only rows and tables
// change at run time in a pgstore schema; functions, indexes and triggers
// are created by the migrations alone, and the settings pgstore changes
// last until the end of a transaction. TestSchemas checks that an emptied
// schema is indistinguishable from a new one.
//
// Schemas is safe for concurrent use by parallel subtests.
type Schemas struct {
	dsn   string
	pool  *pgxpool.Pool // the tests'
	admin *pgxpool.Pool // migrations and emptying

	mu    sync.Mutex
	free  []string // emptied schemas, last given back last
	count int      // schemas made
	base  []string // tables of a newly migrated schema, those with triggers first
	empty string   // emptying statement, with %[1]s for the schema's name
}

// NewSchemas creates a fresh database for t (see DSN), dropped when t ends,
// whose schemas the subtests of t take with Pool.
func NewSchemas(t testing.TB) *Schemas {
	t.Helper()
	dsn := DSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Registered after DSN's drop, so it runs before it.
	t.Cleanup(admin.Close)
	return &Schemas{dsn: dsn, pool: PoolFor(t, dsn), admin: admin}
}

// Pool returns the pool of s (up to 16 connections on its database, shared
// by the tests of s and closed when the test that made s ends) and the name
// of a migrated, empty schema in it that no other test holds. When t ends
// the schema is emptied and given back, to be handed to another test; a
// schema that cannot be emptied (a session of the test still holds a lock
// on it) is never handed out again.
func (s *Schemas) Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	name, err := s.take()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.give(name); err != nil {
			t.Logf("pgtest: schema %s is not reused: %v", name, err)
		}
	})
	return s.pool, name
}

// take returns a free schema, or migrates a new one.
func (s *Schemas) take() (string, error) {
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		name := s.free[n-1]
		s.free = s.free[:n-1]
		s.mu.Unlock()
		return name, nil
	}
	s.count++
	name := fmt.Sprintf("ax_t%d", s.count)
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pgstore.Migrate(ctx, s.admin, pgstore.WithSchema(name)); err != nil {
		return "", fmt.Errorf("migrate schema %s: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base == nil {
		if err := s.learn(ctx, name); err != nil {
			return "", err
		}
	}
	return name, nil
}

// learn records the tables of the newly migrated schema name, and builds
// the emptying statement from them.
func (s *Schemas) learn(ctx context.Context, name string) error {
	rows, err := s.admin.Query(ctx, `SELECT c.relname,
			EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND NOT g.tgisinternal)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')`, name)
	if err != nil {
		return fmt.Errorf("list tables of %s: %w", name, err)
	}
	type table struct {
		name     string
		triggers bool // has triggers of its own, which may write the others
	}
	var tables []table
	for rows.Next() {
		var tb table
		if err := rows.Scan(&tb.name, &tb.triggers); err != nil {
			return fmt.Errorf("list tables of %s: %w", name, err)
		}
		tables = append(tables, tb)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list tables of %s: %w", name, err)
	}
	sort.Slice(tables, func(i, j int) bool {
		if tables[i].triggers != tables[j].triggers {
			return tables[i].triggers
		}
		return tables[i].name < tables[j].name
	})
	var names, deletes, checks []string
	for _, tb := range tables {
		s.base = append(s.base, tb.name)
		names = append(names, quoteLiteral(tb.name))
		if tb.name == "schema_version" {
			continue
		}
		id := "%[1]s." + pgx.Identifier{tb.name}.Sanitize()
		deletes = append(deletes, "DELETE FROM "+id+";")
		checks = append(checks, "EXISTS (SELECT 1 FROM "+id+")")
	}
	// One round trip: drop the tables the test made (history partitions,
	// before the rows of their parent are deleted), delete every row but
	// the schema's version, tables with triggers first, then make sure
	// that no trigger wrote a row back and that no table is gone.
	s.empty = `SET LOCAL lock_timeout = '10s';
DO $empty$
DECLARE
	r record;
	n int;
BEGIN
	FOR r IN SELECT c.relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = %[2]s AND c.relkind IN ('r', 'p') AND NOT c.relname = ANY (ARRAY[` + strings.Join(names, ", ") + `])
		ORDER BY c.relispartition DESC
	LOOP
		EXECUTE format('DROP TABLE IF EXISTS %%I.%%I', %[2]s, r.relname);
	END LOOP;
	SELECT count(*) INTO n FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = %[2]s AND c.relkind IN ('r', 'p');
	IF n <> ` + fmt.Sprint(len(tables)) + ` THEN
		RAISE EXCEPTION 'schema %% has % tables, want ` + fmt.Sprint(len(tables)) + `', %[2]s, n;
	END IF;
	` + strings.Join(deletes, "\n\t") + `
	IF ` + strings.Join(checks, " OR ") + ` THEN
		RAISE EXCEPTION 'rows left in schema %%', %[2]s;
	END IF;
END
$empty$`
	return nil
}

// give empties schema name and frees it.
func (s *Schemas) give(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s.mu.Lock()
	q := fmt.Sprintf(s.empty, pgx.Identifier{name}.Sanitize(), quoteLiteral(name))
	s.mu.Unlock()
	err := pgx.BeginFunc(ctx, s.admin, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, q)
		return err
	})
	if err != nil {
		return fmt.Errorf("empty schema %s: %w", name, err)
	}
	s.mu.Lock()
	s.free = append(s.free, name)
	s.mu.Unlock()
	return nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
