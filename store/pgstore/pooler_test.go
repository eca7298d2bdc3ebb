package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestTransactionPoolerMode: with WithTransactionPooler, New accepts a
// pool in QueryExecModeCacheDescribe and refuses every other mode with
// store.ErrInvalidParams, before it sends anything: the default mode's
// named statements and DescribeExec's two round trips need one server
// connection across transactions, and Exec and SimpleProtocol encode
// pgstore's []byte payloads as bytea and cannot encode []uuid.UUID
// (internal/deploytest runs the whole suite through PgBouncer).
func TestTransactionPoolerMode(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		mode pgx.QueryExecMode
		ok   bool
	}{
		{pgx.QueryExecModeCacheStatement, false},
		{pgx.QueryExecModeCacheDescribe, true},
		{pgx.QueryExecModeDescribeExec, false},
		{pgx.QueryExecModeExec, false},
		{pgx.QueryExecModeSimpleProtocol, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = tc.mode
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			s, err := pgstore.New(ctxT(t), pool, pgstore.WithTransactionPooler())
			if tc.ok {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				s.Close()
				return
			}
			if !errors.Is(err, store.ErrInvalidParams) {
				t.Fatalf("New = %v, want an error wrapping store.ErrInvalidParams", err)
			}
			if st := pool.Stat(); st.TotalConns() != 0 {
				t.Fatalf("New opened %d connections before refusing", st.TotalConns())
			}
			// Without the option the pool is the caller's business.
			s, err = pgstore.New(ctxT(t), pool)
			if err != nil {
				t.Fatalf("New without WithTransactionPooler: %v", err)
			}
			s.Close()
		})
	}
}
