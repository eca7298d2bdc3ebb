package pgtest

import (
	"context"
	"fmt"
	"sort"
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
// about half a second; emptying a schema a test gave back costs
// milliseconds. So a schema is migrated only when none is free, and a test's
// schema is emptied when the test ends and handed to the next one.
//
// Emptying puts the schema back in the state Migrate leaves: every row of
// every table deleted (schema_version kept), and every table the test
// created (the history's day partitions) dropped. Only rows and tables
// change at run time in a pgstore schema; functions, indexes and triggers
// are created by the migrations alone. TestSchemas checks that an emptied
// schema is indistinguishable from a new one.
//
// Schemas is safe for concurrent use by parallel subtests.
type Schemas struct {
	dsn   string
	admin *pgxpool.Pool

	mu    sync.Mutex
	free  []string        // emptied schemas, last given back last
	count int             // schemas created so far
	base  map[string]bool // tables of a newly migrated schema
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
	t.Cleanup(admin.Close)
	return &Schemas{dsn: dsn, admin: admin}
}

// Pool returns a pool of up to 16 connections on the database of s and the
// name of a migrated, empty schema in it that no other test holds. When t
// ends the pool is closed, then the schema emptied and given back; a schema
// that cannot be emptied is never handed out again.
func (s *Schemas) Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	name, err := s.take()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Registered before PoolFor registers the pool's Close, so it runs
	// after it (cleanups run last-in first-out): no session of the test
	// is left when the schema is emptied.
	t.Cleanup(func() {
		if err := s.give(name); err != nil {
			t.Logf("pgtest: schema %s is not reused: %v", name, err)
		}
	})
	return PoolFor(t, s.dsn), name
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
	tables, err := s.tables(ctx, s.admin, name)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	if s.base == nil {
		s.base = make(map[string]bool, len(tables))
		for _, tb := range tables {
			s.base[tb.name] = true
		}
	}
	s.mu.Unlock()
	return name, nil
}

// give empties schema name and frees it.
func (s *Schemas) give(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s.mu.Lock()
	base := s.base
	s.mu.Unlock()
	err := pgx.BeginFunc(ctx, s.admin, func(tx pgx.Tx) error { return s.empty(ctx, tx, name, base) })
	if err != nil {
		return fmt.Errorf("empty schema %s: %w", name, err)
	}
	s.mu.Lock()
	s.free = append(s.free, name)
	s.mu.Unlock()
	return nil
}

// table is a table of a schema.
type table struct {
	name     string
	triggers bool // has triggers of its own, which may write other tables
}

// tables lists the tables of schema (partitions and partitioned tables
// included), those with triggers first.
func (s *Schemas) tables(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string) ([]table, error) {
	rows, err := q.Query(ctx, `SELECT c.relname,
			EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND NOT g.tgisinternal)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')`, schema)
	if err != nil {
		return nil, fmt.Errorf("list tables of %s: %w", schema, err)
	}
	var out []table
	for rows.Next() {
		var tb table
		if err := rows.Scan(&tb.name, &tb.triggers); err != nil {
			return nil, fmt.Errorf("list tables of %s: %w", schema, err)
		}
		out = append(out, tb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables of %s: %w", schema, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].triggers != out[j].triggers {
			return out[i].triggers
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// empty drops the tables of schema that are not in base and deletes the
// rows of the others but schema_version, tables with triggers first (their
// triggers write the others), then checks that no row is left.
func (s *Schemas) empty(ctx context.Context, tx pgx.Tx, schema string, base map[string]bool) error {
	tables, err := s.tables(ctx, tx, schema)
	if err != nil {
		return err
	}
	var kept []string
	found := 0
	for _, tb := range tables {
		if base[tb.name] {
			found++
		}
		id := pgx.Identifier{schema, tb.name}.Sanitize()
		switch {
		case !base[tb.name]:
			if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+id); err != nil {
				return fmt.Errorf("drop %s: %w", id, err)
			}
		case tb.name != "schema_version":
			if _, err := tx.Exec(ctx, "DELETE FROM "+id); err != nil {
				return fmt.Errorf("empty %s: %w", id, err)
			}
			kept = append(kept, id)
		}
	}
	if found != len(base) {
		return fmt.Errorf("%d of its %d tables are gone", len(base)-found, len(base))
	}
	for _, id := range kept {
		var left bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+id+")").Scan(&left); err != nil {
			return fmt.Errorf("check %s: %w", id, err)
		}
		if left {
			return fmt.Errorf("%s still has rows after DELETE", id)
		}
	}
	return nil
}
