package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/sqlitestore"
)

// openedStore is the store a run uses and what the run needs to know of it.
type openedStore struct {
	st    store.Store
	where string
	// db, for the SQLite store, is its writer handle: the work handler
	// records its runs there, in a table of its own.
	db    *sql.DB
	close func()
}

// openStore returns PostgreSQL when DATABASE_URL is set, the in-memory
// store with -mem, and otherwise the embedded durable store on the file
// opts.dbPath.
func openStore(ctx context.Context, opts options) (*openedStore, error) {
	if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("connect to DATABASE_URL: %w", err)
		}
		pg, err := pgstore.New(ctx, pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		cfg := pool.Config().ConnConfig
		return &openedStore{st: pg, where: fmt.Sprintf("PostgreSQL at %s:%d/%s", cfg.Host, cfg.Port, cfg.Database), close: func() {
			_ = pg.Close()
			pool.Close()
		}}, nil
	}
	if opts.mem {
		return &openedStore{st: memstore.New(), where: "the in-memory store (nothing survives this process)", close: func() {}}, nil
	}
	lite, err := sqlitestore.Open(ctx, opts.dbPath)
	if err != nil {
		return nil, err
	}
	if _, err := lite.DB().ExecContext(ctx, createRuns); err != nil {
		_ = lite.Close()
		return nil, fmt.Errorf("create the quickstart's table: %w", err)
	}
	return &openedStore{st: lite, db: lite.DB(), close: func() { _ = lite.Close() },
		where: fmt.Sprintf("SQLite at %s (durable: run it again and the jobs are still there)", lite.Path())}, nil
}

// createRuns makes the table where the work handler records the jobs it
// ran, once each: the effect of a job, kept in the same file as the jobs.
const createRuns = `CREATE TABLE IF NOT EXISTS quickstart_runs (
	job_id TEXT NOT NULL,
	pid    INTEGER NOT NULL,
	at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)`
