// Package citustest gives each test its own schema in a Citus cluster's
// coordinator database, dropped when the test ends.
//
// The coordinator comes from AX_CITUS_URL; there is no default, since a
// Citus cluster is not something a developer's machine has by accident
// (../shared/citus/cluster.sh start runs one and prints the URL). When
// AX_CITUS_URL is unset or the coordinator does not answer, the tests that
// ask for a schema are skipped with a message saying what to set, unless
// AX_REQUIRE_CITUS=1 (as in CI), when they fail. A URL that answers but is
// not a Citus coordinator always fails: it was set on purpose, and wrong.
//
// Tests get schemas, not databases: Citus keeps its metadata (worker
// nodes, distributed tables) per database, so a fresh database would have
// to be set up on every node; a schema of the one database the cluster
// script prepared costs a CREATE SCHEMA, which Citus propagates itself.
package citustest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/deadlockretry"
	"github.com/axsched/ax/internal/pgtest"
)

// URLEnv and RequireEnv are the environment variables the package reads.
const (
	URLEnv     = "AX_CITUS_URL"
	RequireEnv = "AX_REQUIRE_CITUS"
)

var (
	setupOnce sync.Once
	skipMsg   string // why the tests skip (or fail under RequireEnv)
	setupErr  error  // a coordinator that answers but is not one
	version   string // citus_version()'s number, e.g. "13.2.2"
)

// URL returns AX_CITUS_URL, or "" when it is unset.
func URL() string { return os.Getenv(URLEnv) }

// Available reports whether a Citus coordinator answers at URL, with the
// reason when it does not. It never skips nor fails.
func Available() (bool, string) {
	setupOnce.Do(setup)
	if skipMsg != "" {
		return false, skipMsg
	}
	if setupErr != nil {
		return false, setupErr.Error()
	}
	return true, ""
}

// Require skips t when no Citus coordinator answers (failing it instead
// under AX_REQUIRE_CITUS=1), and fails t when AX_CITUS_URL names a server
// that is not a Citus coordinator. Then t holds the Citus tests' shared
// lock until it ends, so that a test that stops or crashes a node
// (Exclusive) waits for it.
func Require(t testing.TB) {
	t.Helper()
	// The lock first: this process's first probe of the coordinator
	// (setup) must not run while another package's Exclusive test has
	// crashed or is restarting it.
	lockShared(t)
	available(t)
}

// available is Require without the lock.
func available(t testing.TB) {
	t.Helper()
	setupOnce.Do(setup)
	if skipMsg != "" {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("citustest: %s (%s=1)", skipMsg, RequireEnv)
		}
		t.Skip("citustest: " + skipMsg)
	}
	if setupErr != nil {
		t.Fatalf("citustest: %v", setupErr)
	}
}

// Version returns the Citus version of the coordinator (citus_version()'s
// number, such as "13.2.2"). It calls Require first.
func Version(t testing.TB) string {
	t.Helper()
	Require(t)
	return version
}

// Schema returns a pool on the coordinator and the name of a new, empty
// schema in it that no other test uses. The schema and every table in it,
// distributed or not, are dropped when t ends, after the pool is closed.
// The pool has up to 4 connections: each distributed statement opens its
// own to the workers, and the cluster is small.
func Schema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	Require(t)
	name := "axc_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Fatalf("citustest: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("citustest: create schema %s: %v", name, err)
	}
	t.Cleanup(func() { drop(t, name) })
	return Pool(t), name
}

// Pool returns a pool of up to 4 connections on the coordinator, closed
// when t ends. It calls Require first.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	Require(t)
	return PoolFor(t, URL())
}

// PoolFor returns a pool of up to 4 connections on dsn, closed when t
// ends.
func PoolFor(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	return PoolWith(t, dsn, nil)
}

// PoolWith is PoolFor with the pool's configuration passed to configure
// (if not nil) before the pool is made: a tracer, say. Its pools, and so
// Pool's and PoolFor's, refuse uuid.UUID values as pgtest's do
// (pgtest.StrictUUIDs).
func PoolWith(t testing.TB, dsn string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("citustest: %v", err)
	}
	cfg.MaxConns = 4
	pgtest.StrictUUIDs(cfg)
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("citustest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// WorkerURLs returns the URLs of the cluster's active worker nodes, as
// the coordinator names them (pg_dist_node), with AX_CITUS_URL's user,
// database and parameters: for the tests that must connect to a worker.
func WorkerURLs(t testing.TB) []string {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Fatalf("citustest: %v", err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(ctx, `SELECT nodename, nodeport FROM pg_dist_node
		WHERE noderole = 'primary' AND isactive AND groupid <> 0 ORDER BY nodeport`)
	type node struct {
		Host string
		Port int
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[node])
	if err != nil {
		t.Fatalf("citustest: list workers: %v", err)
	}
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("citustest: %s is not a URL: %v", URLEnv, err)
	}
	var urls []string
	for _, n := range nodes {
		w := *u
		w.Host = fmt.Sprintf("%s:%d", n.Host, n.Port)
		urls = append(urls, w.String())
	}
	return urls
}

// drop drops schema name with everything in it. Citus propagates the
// DROP SCHEMA to the workers, shards included.
func drop(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Errorf("citustest: drop schema %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	err = RetryDeadlocks(func() error {
		_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
		return err
	})
	if err != nil {
		t.Errorf("citustest: drop schema %s: %v", name, err)
	}
}

// deadlockTries bounds RetryDeadlocks; its pauses, from
// deadlockBackoff and doubled each time, add up to about 3 s.
const (
	deadlockTries   = 7
	deadlockBackoff = 50 * time.Millisecond
)

// RetryDeadlocks runs fn, a statement of a test's setup or cleanup, again
// while it fails with a deadlock (SQLSTATE 40P01), up to deadlockTries
// times, and returns its last error. On Citus, statements that lock a
// schema's Citus local table (citus_2pc) and its distributed tables, such
// as DROP SCHEMA and a TRUNCATE of the schema's tables, deadlock on
// Citus's metadata when two schemas' run at once (they take their locks
// in another order), and Citus cancels one: every test's schema is
// dropped while other tests reset theirs. MigrateCitus retries its own
// with the same loop (internal/deadlockretry).
func RetryDeadlocks(fn func() error) error {
	return deadlockretry.Run(context.Background(), deadlockTries, deadlockBackoff, fn)
}

// setup checks once per process that AX_CITUS_URL names a Citus
// coordinator.
func setup() {
	if URL() == "" {
		skipMsg = URLEnv + " is not set: run ../shared/citus/cluster.sh start and set " + URLEnv + " to the URL it prints to run the Citus tests"
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := connectStarted(ctx)
	if err != nil {
		skipMsg = fmt.Sprintf("no Citus coordinator answers at %s (%v): start one (../shared/citus/cluster.sh start) or fix %s", redact(URL()), err, URLEnv)
		return
	}
	defer conn.Close(context.Background())
	var installed bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&installed); err != nil {
		setupErr = fmt.Errorf("%s: %w", redact(URL()), err)
		return
	}
	if !installed {
		setupErr = fmt.Errorf("%s=%s: the database has no citus extension: point it at a Citus coordinator", URLEnv, redact(URL()))
		return
	}
	var coordinator bool
	var workers int
	err = conn.QueryRow(ctx, `SELECT citus_is_coordinator(),
		(SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND isactive AND groupid <> 0),
		substring(citus_version() from 'Citus ([0-9.]+)')`).Scan(&coordinator, &workers, &version)
	if err != nil {
		setupErr = fmt.Errorf("%s: %w", redact(URL()), err)
		return
	}
	if !coordinator {
		setupErr = fmt.Errorf("%s=%s is not the Citus coordinator (citus_is_coordinator() is false): point it at the coordinator", URLEnv, redact(URL()))
		return
	}
	if workers == 0 {
		setupErr = fmt.Errorf("%s=%s: the coordinator has no worker nodes (citus_add_node)", URLEnv, redact(URL()))
	}
}

// connectStarted connects to the coordinator, waiting until ctx ends
// while it is starting up or recovering (SQLSTATE 57P03): a test that
// crashed or restarted it ends once it answers, but its recovery can
// restart it once more.
func connectStarted(ctx context.Context) (*pgx.Conn, error) {
	for {
		conn, err := pgx.Connect(ctx, URL())
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "57P03" || ctx.Err() != nil {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return URLEnv
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
