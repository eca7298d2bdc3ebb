package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
)

// openStore returns PostgreSQL at dsn (migrated), or the in-memory store
// when dsn is empty.
func openStore(ctx context.Context, dsn string) (st store.Store, where string, closeFn func(), err error) {
	if dsn == "" {
		return memstore.New(), "the in-memory store (set DATABASE_URL for PostgreSQL)", func() {}, nil
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
