// Package pgtest gives each test its own fresh PostgreSQL database, created
// in milliseconds from a template database that already has the pgstore
// migrations applied, and dropped when the test ends.
//
// The server comes from TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable; the URL's user
// must be allowed to create databases. When no server answers, tests that
// ask for a database are skipped with a message naming TEST_DATABASE_URL,
// unless AX_REQUIRE_POSTGRES=1, when they fail.
//
// The template is named after a hash of the migration files, created once
// per server (and per change of the migrations) under a server-wide advisory
// lock, so concurrent test processes (go test ./... runs packages in
// parallel) neither race nor use a half-built template.
//
// Suites that need hundreds of empty stores (the storetest conformance
// suite) take them from Schemas instead: schemas of one database, emptied
// and reused from test to test, since a database per test costs seconds
// on a loaded machine.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store/pgstore"
)

// DefaultURL is the server used when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// templateLockKey is the advisory lock serializing template creation across
// processes.
const templateLockKey = 0x6178_7467 // "axtg"

var (
	setupOnce sync.Once
	setupErr  error
	skipMsg   string
	tplName   string
)

// ServerURL returns TEST_DATABASE_URL, or DefaultURL.
func ServerURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// DSN creates a fresh database for t, with the pgstore schema (DefaultSchema)
// migrated, and returns its URL. The database is dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	return createDatabase(t, true)
}

// EmptyDSN is DSN without the migrations: a fresh, empty database.
func EmptyDSN(t testing.TB) string {
	t.Helper()
	return createDatabase(t, false)
}

// Pool returns a strict pool (StrictUUIDs) on a fresh migrated database
// (see DSN), closed when t ends (before the database is dropped).
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolFor(t, DSN(t))
}

// PoolFor returns a pool on dsn with up to 16 connections, closed when t
// ends, its configuration passed to each of configure (a tracer, say)
// before it is made. The pool is strict: it refuses uuid.UUID values
// (StrictUUIDs).
func PoolFor(t testing.TB, dsn string, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 16
	StrictUUIDs(cfg)
	for _, c := range configure {
		c(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func createDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	setupOnce.Do(setup)
	if skipMsg != "" {
		if os.Getenv("AX_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("%s (AX_REQUIRE_POSTGRES=1)", skipMsg)
		}
		t.Skip(skipMsg)
	}
	if setupErr != nil {
		t.Fatalf("pgtest: %v", setupErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(context.Background())

	name := "ax_test_" + randomHex(8)
	tpl := "template0"
	if migrated {
		tpl = tplName
	}
	// CREATE DATABASE fails while another session is connected to the
	// template; template creation closes its connections first, but a
	// concurrent DROP of a stale template in another process may briefly
	// conflict, so retry a few times.
	for i := 0; ; i++ {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tpl}.Sanitize())
		if err == nil || i == 20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, ServerURL())
		if err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(ServerURL(), name)
}

// setup checks the server and makes sure the template exists.
func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pingCtx, pingCancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := pgx.Connect(pingCtx, ServerURL())
	pingCancel()
	if err != nil {
		skipMsg = fmt.Sprintf("PostgreSQL not reachable at %s (%v): set TEST_DATABASE_URL to a server's URL to run these tests", redact(ServerURL()), err)
		return
	}
	defer conn.Close(context.Background())
	tplName = "ax_tpl_" + migrationsHash()
	setupErr = ensureTemplate(ctx, conn, tplName)
}

func ensureTemplate(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return fmt.Errorf("lock template: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", templateLockKey) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	// Build under a temporary name and rename, so a crash never leaves a
	// half-migrated template under the real name.
	tmp := pgx.Identifier{name + "_tmp"}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+tmp+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+tmp+" TEMPLATE template0"); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, withDatabase(ServerURL(), name+"_tmp"))
	if err != nil {
		return err
	}
	err = pgstore.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+tmp+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	return nil
}

// migrationsHash hashes the pgstore migration files, read from the source
// tree, so a changed migration gets a new template. Without sources (a
// binary built with -trimpath), it falls back to the schema version.
func migrationsHash() string {
	h := sha256.New()
	_, file, _, ok := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "store", "pgstore", "migrations")
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if !ok || err != nil || len(files) == 0 {
		return fmt.Sprintf("v%d", pgstore.SchemaVersion())
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Sprintf("v%d", pgstore.SchemaVersion())
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func withDatabase(serverURL, db string) string {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme == "" {
		// A keyword/value connection string.
		return serverURL + " dbname=" + db
	}
	u.Path = "/" + db
	return u.String()
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "TEST_DATABASE_URL"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
