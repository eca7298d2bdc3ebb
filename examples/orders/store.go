package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/sqlitestore"
)

// database is the service's database, which holds AX's jobs too: its
// transactions (Tx: a *sql.Tx on SQLite, a pgx.Tx on PostgreSQL) take
// the service's writes and AX's calls alike. Only the SQL differs.
type database[Tx any] struct {
	store store.Store
	where string
	// inTx runs fn in a transaction, committed when fn returns nil.
	inTx       func(ctx context.Context, fn func(Tx) error) error
	placeOrder func(ctx context.Context, tx Tx, cents int) (int64, error)
	pay        func(ctx context.Context, tx Tx, order int64, attempt int) error
	ship       func(ctx context.Context, order int64) error
	// count counts the payments of orders, those made by a retry, and
	// their shipments.
	count func(ctx context.Context, orders []int64) (payments, retried, shipments int, err error)
	close func()
}

// openSQLite opens the embedded store on path, the service's tables in the
// same file.
func openSQLite(ctx context.Context, path string) (*database[*sql.Tx], error) {
	st, err := sqlitestore.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	db := st.DB()
	_, err = db.ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY AUTOINCREMENT, cents INTEGER NOT NULL);
		CREATE TABLE IF NOT EXISTS payments (order_id INTEGER PRIMARY KEY, attempt INTEGER NOT NULL);
		CREATE TABLE IF NOT EXISTS shipments (order_id INTEGER NOT NULL)`)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("create tables: %w", err)
	}
	return &database[*sql.Tx]{
		store: st,
		where: "SQLite at " + st.Path(),
		inTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // no-op after Commit
			if err := fn(tx); err != nil {
				return err
			}
			return tx.Commit()
		},
		placeOrder: func(ctx context.Context, tx *sql.Tx, cents int) (id int64, err error) {
			err = tx.QueryRowContext(ctx, `INSERT INTO orders (cents) VALUES (?) RETURNING id`, cents).Scan(&id)
			return id, err
		},
		pay: func(ctx context.Context, tx *sql.Tx, order int64, attempt int) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO payments VALUES (?, ?)`, order, attempt)
			return err
		},
		ship: func(ctx context.Context, order int64) error {
			_, err := db.ExecContext(ctx, `INSERT INTO shipments VALUES (?)`, order)
			return err
		},
		count: func(ctx context.Context, orders []int64) (p, r, s int, err error) {
			err = db.QueryRowContext(ctx, `SELECT
				(SELECT count(*) FROM payments WHERE order_id BETWEEN ?1 AND ?2),
				(SELECT count(*) FROM payments WHERE order_id BETWEEN ?1 AND ?2 AND attempt > 1),
				(SELECT count(*) FROM shipments WHERE order_id BETWEEN ?1 AND ?2)`,
				slices.Min(orders), slices.Max(orders)).Scan(&p, &r, &s)
			return p, r, s, err
		},
		close: func() { _ = st.Close() },
	}, nil
}

// openPostgres opens pgstore on the database at url, the service's tables
// beside AX's schema.
func openPostgres(ctx context.Context, url string) (*database[pgx.Tx], error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	st, err := pgstore.New(ctx, pool)
	if err == nil {
		_, err = pool.Exec(ctx, `
			CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, cents int NOT NULL);
			CREATE TABLE IF NOT EXISTS payments (order_id bigint PRIMARY KEY, attempt int NOT NULL);
			CREATE TABLE IF NOT EXISTS shipments (order_id bigint NOT NULL)`)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	cfg := pool.Config().ConnConfig
	return &database[pgx.Tx]{
		store: st,
		where: fmt.Sprintf("PostgreSQL at %s:%d/%s", cfg.Host, cfg.Port, cfg.Database),
		inTx: func(ctx context.Context, fn func(pgx.Tx) error) error {
			return pgx.BeginFunc(ctx, pool, fn)
		},
		placeOrder: func(ctx context.Context, tx pgx.Tx, cents int) (id int64, err error) {
			err = tx.QueryRow(ctx, `INSERT INTO orders (cents) VALUES ($1) RETURNING id`, cents).Scan(&id)
			return id, err
		},
		pay: func(ctx context.Context, tx pgx.Tx, order int64, attempt int) error {
			_, err := tx.Exec(ctx, `INSERT INTO payments VALUES ($1, $2)`, order, attempt)
			return err
		},
		ship: func(ctx context.Context, order int64) error {
			_, err := pool.Exec(ctx, `INSERT INTO shipments VALUES ($1)`, order)
			return err
		},
		count: func(ctx context.Context, orders []int64) (p, r, s int, err error) {
			err = pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM payments WHERE order_id = ANY($1)),
				(SELECT count(*) FROM payments WHERE order_id = ANY($1) AND attempt > 1),
				(SELECT count(*) FROM shipments WHERE order_id = ANY($1))`, orders).Scan(&p, &r, &s)
			return p, r, s, err
		},
		close: func() {
			_ = st.Close()
			pool.Close()
		},
	}, nil
}
