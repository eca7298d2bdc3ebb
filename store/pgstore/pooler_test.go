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

// TestTransactionPoolerMode: New refuses, with store.ErrInvalidParams and
// before it sends anything, a pool in QueryExecModeExec or
// SimpleProtocol, which cannot send pgstore's parameters (Exec and
// SimpleProtocol encode []byte payloads as bytea and cannot encode a
// [16]byte ID at all, checked here too), with or without
// WithTransactionPooler, and so does NewCitus. With
// WithTransactionPooler it accepts only QueryExecModeCacheDescribe: the
// default mode's named statements and DescribeExec's two round trips need
// one server connection across transactions (internal/deploytest runs the
// whole suite through PgBouncer). Without the option the other modes work
// on a direct connection.
func TestTransactionPoolerMode(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		mode                 pgx.QueryExecMode
		direct, behindPooler bool // New accepts the pool without, with WithTransactionPooler
	}{
		{pgx.QueryExecModeCacheStatement, true, false},
		{pgx.QueryExecModeCacheDescribe, true, true},
		{pgx.QueryExecModeDescribeExec, true, false},
		{pgx.QueryExecModeExec, false, false},
		{pgx.QueryExecModeSimpleProtocol, false, false},
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
			refused := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, store.ErrInvalidParams) {
					t.Fatalf("%s = %v, want an error wrapping store.ErrInvalidParams", what, err)
				}
				if st := pool.Stat(); st.TotalConns() != 0 {
					t.Fatalf("%s opened %d connections before refusing", what, st.TotalConns())
				}
			}
			for _, c := range []struct {
				name string
				opts []pgstore.Option
				ok   bool
			}{
				{"New with WithTransactionPooler", []pgstore.Option{pgstore.WithTransactionPooler()}, tc.behindPooler},
				{"New", nil, tc.direct},
			} {
				s, err := pgstore.New(ctxT(t), pool, c.opts...)
				if c.ok {
					if err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					s.Close()
					continue
				}
				refused(c.name, err)
			}
			if tc.direct {
				return
			}
			_, err = pgstore.NewCitus(ctxT(t), pool)
			refused("NewCitus", err)
			// Why: the mode cannot send an ID as pgstore does.
			var got [16]byte
			err = pool.QueryRow(ctxT(t), `SELECT $1::uuid`, [16]byte{1}).Scan(&got)
			if err == nil {
				t.Fatalf("%s sent a [16]byte ID: New need not refuse it", tc.mode)
			}
		})
	}
}
