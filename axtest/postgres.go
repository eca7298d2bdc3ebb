package axtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

// DefaultDatabaseURL is the server Postgres uses when TEST_DATABASE_URL is
// not set.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Postgres returns, for a test, a pgstore on a fresh schema of its own in
// the database of TEST_DATABASE_URL (default DefaultDatabaseURL), and a
// pool on that database for the test's own tables and transactions
// (ScheduleTx, CompleteTx).
//
// The test's tables are isolated too: the pool's connections have as
// search_path a second fresh schema, then public, so the tables,
// sequences and types the test (or the code under test, running its
// migrations) creates without a schema name land in it, unseen by other
// tests, while extensions installed in public still resolve. Both
// schemas are dropped, with everything in them, when the test ends, so
// tests may run in parallel on one database. The store keeps to its own
// schema whatever the search_path (pgstore qualifies its names). Code
// that opens its own connections can share the pool's settings through
// stdlib.OpenDBFromPool (database/sql) or pool.Config(); the schema is
// pool.Config().ConnConfig.RuntimeParams["search_path"]'s first entry.
//
// When no server answers, the test is skipped with a message saying what
// to set — or fails, when AX_REQUIRE_POSTGRES=1 (in CI).
func Postgres(t testing.TB) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = DefaultDatabaseURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("axtest: TEST_DATABASE_URL: %v", err)
	}
	base := "axtest_" + randomHex(8)
	axSchema, appSchema := base, base+"_app"
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{appSchema}.Sanitize() + ", public"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		msg := "axtest: no PostgreSQL server answers at TEST_DATABASE_URL (" + redact(url) + "): " + err.Error() +
			"; set TEST_DATABASE_URL to a server the test user may create schemas on"
		if os.Getenv("AX_REQUIRE_POSTGRES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{axSchema}.Sanitize()+", "+
			pgx.Identifier{appSchema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{appSchema}.Sanitize()); err != nil {
		t.Fatalf("axtest: create schema %s: %v", appSchema, err)
	}
	st, err := pgstore.New(ctx, pool, pgstore.WithSchema(axSchema))
	if err != nil {
		t.Fatalf("axtest: pgstore on schema %s: %v", axSchema, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, pool
}

// NewPostgresScheduler returns a Scheduler for a test on a fresh schema
// (see Postgres), not started (use Work to run jobs), stopped when the test
// ends, with the pool for the test's own tables and transactions (its
// search_path is a fresh schema of the test's, dropped at the end). The store's clock
// is the database's: move time with ax.In and ax.At rather than a Clock.
func NewPostgresScheduler(t testing.TB, cfg ax.Config) (*ax.Scheduler, *pgxpool.Pool) {
	t.Helper()
	st, pool := Postgres(t)
	cfg.Store = st
	return newScheduler(t, cfg), pool
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redact hides a URL's password.
func redact(raw string) string {
	if cfg, err := pgx.ParseConfig(raw); err == nil && cfg.Password != "" {
		return cfg.User + ":***@" + cfg.Host
	}
	return raw
}
