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

// Postgres returns a pgstore on a fresh schema of its own in the database
// of TEST_DATABASE_URL (default DefaultDatabaseURL), and a pool on that
// database for the test's own transactions (ScheduleTx, CompleteTx). The
// schema is dropped when the test ends. When no server answers, the test
// is skipped with a message saying what to set — or fails, when
// AX_REQUIRE_POSTGRES=1 (in CI).
func Postgres(t testing.TB) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = DefaultDatabaseURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
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
	schema := "axtest_" + randomHex(8)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	st, err := pgstore.New(ctx, pool, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatalf("axtest: pgstore on schema %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, pool
}

// NewPostgresScheduler returns a Scheduler for a test on a fresh schema
// (see Postgres), not started (use Work to run jobs), stopped when the test
// ends, with the pool for the test's own transactions. The store's clock
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
