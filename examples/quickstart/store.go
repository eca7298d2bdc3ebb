package main

import (
	"context"
	"fmt"
	"os"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openStore returns PostgreSQL when DATABASE_URL is set, else the embedded
// in-memory store.
func openStore(ctx context.Context) (st store.Store, where string, closeFn func(), err error) {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return memstore.New(), "the embedded in-memory store (set DATABASE_URL to use PostgreSQL)", func() {}, nil
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, "", nil, fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	pg, err := pgstore.New(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	cfg := pool.Config().ConnConfig
	return pg, fmt.Sprintf("PostgreSQL at %s:%d/%s", cfg.Host, cfg.Port, cfg.Database), func() {
		_ = pg.Close()
		pool.Close()
	}, nil
}
