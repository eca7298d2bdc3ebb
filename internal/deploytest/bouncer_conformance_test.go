package deploytest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/internal/raceflag"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/storetest"
)

// bouncerMode is the query execution mode the scenarios give the pools
// that go through PgBouncer: the mode pgstore's docs prescribe
// (pgstore.WithTransactionPooler). AX_BOUNCER_MODE=statement tries pgx's
// default mode instead (pgstore refuses it with WithTransactionPooler,
// which TestBouncerConformance then leaves out, to show what breaks).
// Exec and SimpleProtocol are not offered: New refuses them with or
// without the option, since they cannot send pgstore's parameters.
func bouncerMode() pgx.QueryExecMode {
	if os.Getenv("AX_BOUNCER_MODE") == "statement" {
		return pgx.QueryExecModeCacheStatement
	}
	return pgx.QueryExecModeCacheDescribe
}

// TestBouncerConformance runs the storetest conformance suite on stores
// whose pool goes through PgBouncer in transaction mode, each subtest on
// an empty schema of one database (pgtest.Schemas), the listener on a
// direct connection to the server.
func TestBouncerConformance(t *testing.T) {
	suiteNotUnderRace(t)
	noLeaks(t)
	storetest.Run(t, bouncerStores(t))
}

// TestBouncerEarlyDirectStart runs the suite's InsertClaimer tests
// through PgBouncer on stores with pgstore.WithEarlyDirectStart: the
// insert's batch (its settings and the statement) stays on one server
// connection, and the flush's transaction may take any other.
func TestBouncerEarlyDirectStart(t *testing.T) {
	suiteNotUnderRace(t)
	noLeaks(t)
	storetest.RunInsertClaimer(t, bouncerStores(t, pgstore.WithEarlyDirectStart()))
}

// suiteNotUnderRace skips the store suites (conformance and model) run
// through PgBouncer in a test binary built with -race. What they check
// is the statements' life on a transaction pooler's server connections;
// their Go code is pgstore's, which its own TestConformance and TestModel
// run under the race detector (WithTransactionPooler changes only which
// options New accepts and that the listener may be absent). CI runs them
// in its plain run (go test ./...); under -race they added about 25 s.
// TestBouncerCluster, hosts beside each other through PgBouncer, still
// runs under -race.
func suiteNotUnderRace(t *testing.T) {
	t.Helper()
	if raceflag.Enabled {
		t.Skip("the store suites through PgBouncer run without -race (go test ./internal/deploytest)")
	}
}

// bouncerStores returns a store maker for the suite: each call a Store
// with extra options on an empty schema of one database for t
// (pgtest.Schemas), its pool through a PgBouncer of t's in transaction
// mode, its listener on a direct connection, the pool refusing uuid.UUID
// (pgtest.StrictUUIDs, as pgstore's suites). Subtests that make a store
// run in parallel.
func bouncerStores(t *testing.T, extra ...pgstore.Option) storetest.NewStoreFunc {
	top := t
	b := startBouncer(t, pgtest.ServerURL())
	schemas := pgtest.NewSchemas(t)
	var (
		once   sync.Once
		pooled *pgxpool.Pool
		direct string
	)
	var parallel sync.Map
	return func(t *testing.T) store.Store {
		if _, marked := parallel.LoadOrStore(t, true); !marked {
			t.Parallel()
		}
		pool, schema := schemas.Pool(t)
		once.Do(func() {
			// One pool through PgBouncer for the suite, on the
			// schemas' database, as the schemas' own pool is.
			direct = withDatabase(top, pgtest.ServerURL(), pool.Config().ConnConfig.Database)
			pooled = poolOn(top, b.url(top, direct), bouncerMode(), 16, pgtest.StrictUUIDs)
		})
		opts := []pgstore.Option{pgstore.WithSchema(schema), pgstore.WithoutMigrate(), pgstore.WithListenerConnString(direct)}
		if os.Getenv("AX_BOUNCER_MODE") == "" {
			opts = append(opts, pgstore.WithTransactionPooler())
		}
		s, err := pgstore.New(context.Background(), pooled, append(opts, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// TestBouncerModel runs the model-based test (storetest.RunModel) on a
// store whose pool, CompleteTx's transactions included, goes through
// PgBouncer; once with the listener on a direct connection, once polling
// only.
func TestBouncerModel(t *testing.T) {
	suiteNotUnderRace(t)
	noLeaks(t)
	b := startBouncer(t, pgtest.ServerURL())
	for _, tc := range []struct {
		name   string
		direct bool
	}{{"DirectListener", true}, {"PollingOnly", false}} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
				direct := directURL(t)
				pool := poolOn(t, b.url(t, direct), bouncerMode(), 8, pgtest.StrictUUIDs)
				opts := []pgstore.Option{pgstore.WithoutMigrate(), pgstore.WithTransactionPooler()}
				if tc.direct {
					opts = append(opts, pgstore.WithListenerConnString(direct))
				}
				s, err := pgstore.New(context.Background(), pool, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return &storetest.ModelStore{Store: s, CompleteTx: func(ctx context.Context, p store.FinishParams, commit bool) (bool, error) {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return false, err
					}
					ok, err := s.CompleteTx(ctx, tx, p)
					if err != nil || !commit {
						return ok, errors.Join(err, tx.Rollback(ctx))
					}
					return ok, tx.Commit(ctx)
				}}
			}, storetest.ModelOptions{Seeds: 1, Steps: 200})
		})
	}
}
