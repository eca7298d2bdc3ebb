// Package demo opens the store an example runs on, the way
// examples/quickstart does: PostgreSQL when DATABASE_URL is set, and
// otherwise the embedded durable store, an SQLite file in a temporary
// directory removed when the example ends.
package demo

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/sqlitestore"
)

// Store is an opened store and the handles an example needs for its own
// tables: exactly one of SQL and Pool is set.
type Store struct {
	// Store is the AX store, for ax.Config.Store.
	Store store.Store
	// SQL is the SQLite store's writer (sqlitestore.Store.DB): begin
	// transactions that hold both the example's writes and AX's there.
	SQL *sql.DB
	// Pool is the PostgreSQL pool the store runs on.
	Pool *pgxpool.Pool
	// Where says which store it is, for the example's first line.
	Where string

	close func()
}

// Open opens PostgreSQL at DATABASE_URL (migrating AX's schema) when the
// variable is set, and otherwise a new SQLite file named name+".db" in a
// temporary directory.
func Open(ctx context.Context, name string) (*Store, error) {
	if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("connect to DATABASE_URL: %w", err)
		}
		pg, err := pgstore.New(ctx, pool)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("open pgstore: %w", err)
		}
		cfg := pool.Config().ConnConfig
		return &Store{Store: pg, Pool: pool, Where: fmt.Sprintf("PostgreSQL at %s:%d/%s", cfg.Host, cfg.Port, cfg.Database),
			close: func() { _ = pg.Close(); pool.Close() }}, nil
	}
	dir, err := os.MkdirTemp("", "ax-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("make a directory for the SQLite file: %w", err)
	}
	lite, err := sqlitestore.Open(ctx, filepath.Join(dir, name+".db"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("open sqlitestore: %w", err)
	}
	return &Store{Store: lite, SQL: lite.DB(), Where: "SQLite at " + lite.Path() + " (DATABASE_URL unset)",
		close: func() { _ = lite.Close(); _ = os.RemoveAll(dir) }}, nil
}

// Close closes the store and, for SQLite, removes its file. Call it after
// every Scheduler on the store has stopped.
func (s *Store) Close() { s.close() }
