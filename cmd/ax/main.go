// Command ax operates an AX cluster from a shell: it lists, retries,
// cancels and deletes jobs by filter, pauses and resumes kinds and
// periodic schedules, opens and closes kinds' circuit breakers, shows
// nodes, the maintenance leader and the queue (with the kinds' flow
// limits and breakers), and migrates the PostgreSQL schema. It needs no running Scheduler: it
// talks to the cluster's database.
//
//	ax [--database-url URL] [--schema ax] [--json] COMMAND [flags] [args]
//
//	ax migrate up|status
//	ax jobs list [filters] [--order newest|oldest] [--limit N] [--cursor C]
//	ax jobs show ID
//	ax jobs retry|cancel|delete [ID...] [filters] [--yes] [--all]
//	ax kinds list | pause KIND [--force] | resume KIND | open KIND | close KIND
//	ax periodic list | pause NAME | resume NAME | trigger NAME
//	ax nodes
//	ax stats
//	ax serve --keys-file FILE [--addr 127.0.0.1:8080] [--prefix /ax] [--read-only]
//	ax sessions revoke KEY_ID
//
// Filters (jobs list, retry, cancel, delete): --kind, --state, --priority
// (each repeatable or comma-separated), --unique-key, --unique-key-prefix,
// --meta k=v (repeatable), --error-contains, --node, --run-after,
// --run-before, --finished-after, --finished-before (an RFC 3339 time,
// or a duration meaning that long ago: 90m).
//
// ax serve serves the HTTP API and the web dashboard of package axhttp
// on the cluster's store until interrupted (SIGINT, SIGTERM). Requests
// are signed with the keys of --keys-file (one per line: ID SECRET
// [read-only]); the dashboard's login takes a key ID and its secret. It
// runs no jobs.
//
// AX_SESSION_KEY (32 bytes or more of randomness) signs the dashboard's
// session cookies and CSRF tokens. Set it, the same on every ax serve
// behind one address: without it each process makes a random key, so a
// restart logs everyone out and replicas refuse each other's cookies.
// A session lasts --session-ttl (8h) at most and ends after
// --session-idle (30m) without a request; a logout ends it on every
// server on the store, and ax sessions revoke KEY_ID ends every session
// of a key (after a leak, before removing the key).
//
// Every client address may make --client-rate requests a second
// (default 50, bursts of --client-burst 100) and --failure-burst (20)
// failed authentications (bad signatures, unknown keys, failed logins),
// then --failure-rate (1) a second; past either it gets 429 with
// Retry-After. 0 turns a limit off; --rate limits each key besides.
// Behind a reverse proxy, name it with --trusted-proxy (addresses or CIDR
// prefixes): the limits then count the client its X-Forwarded-For names,
// not the proxy, which would otherwise lock every client out together.
// Behind a proxy that terminates TLS, --secure-cookies marks the cookies
// Secure (--tls-cert does so itself).
//
// The database is --database-url, or DATABASE_URL: a PostgreSQL URL, or
// a SQLite file of store/sqlitestore as sqlite:PATH (or a path ending in
// .db, .sqlite or .sqlite3). While a service holds the SQLite file, the
// commands read it beside the service and changes fail (make them
// through the service), and ax serve refuses to start; otherwise ax holds
// the file while it runs, so the service cannot open it until ax ends
// (ax serve included). Output is a table for
// people, or with --json one JSON document for scripts. Bulk changes ask
// for confirmation on a terminal; elsewhere they need --yes.
//
// Exit codes: 0 success, 1 error (the database failed, the user declined
// a confirmation), 2 usage (unknown command or flag, invalid value,
// malformed cursor, a bulk change without --yes off a terminal), 3 not
// found (a job, kind or schedule).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, storeOpener{getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// pgOpener opens PostgreSQL stores: the URL is --database-url, or
// DATABASE_URL.
type pgOpener struct {
	getenv func(string) string
}

func (o pgOpener) pool(ctx context.Context, c connection) (*pgxpool.Pool, error) {
	url := c.url
	if url == "" {
		url = o.getenv("DATABASE_URL")
	}
	if url == "" {
		return nil, usageErrorf("no database: give --database-url or set DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErrorf("--database-url: %v", err)
	}
	cfg.MaxConns = 4 // a CLI needs few connections
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return pool, nil
}

// Store opens the schema without migrating it: an operator's command must
// not change the schema behind a deploy's back. A schema at another
// version than this binary's is an error naming both.
func (o pgOpener) Store(ctx context.Context, c connection) (store.Store, func(), error) {
	pool, err := o.pool(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	st, err := pgstore.New(ctx, pool, pgstore.WithSchema(c.schema), pgstore.WithoutMigrate())
	if errors.Is(err, pgstore.ErrNoSchema) {
		pool.Close()
		return nil, nil, noSchema(fmt.Sprintf("schema %q", c.schema), err)
	}
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("%w (see: ax migrate status)", err)
	}
	return st, func() { _ = st.Close(); pool.Close() }, nil
}

// Migrator opens the schema's migrations.
func (o pgOpener) Migrator(ctx context.Context, c connection) (migrator, func(), error) {
	pool, err := o.pool(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return pgMigrator{pool: pool, schema: c.schema}, pool.Close, nil
}

// pgMigrator migrates one PostgreSQL schema with pgstore.Migrate.
type pgMigrator struct {
	pool   *pgxpool.Pool
	schema string
}

func (m pgMigrator) Up(ctx context.Context) error {
	return pgstore.Migrate(ctx, m.pool, pgstore.WithSchema(m.schema))
}

// Versions reads the schema's version from its schema_version table (0
// when the schema has none yet). pgstore exports no reader of it, so the
// query is here: it is the table Migrate writes.
func (m pgMigrator) Versions(ctx context.Context) (database, binary int, err error) {
	table := pgx.Identifier{m.schema, "schema_version"}.Sanitize()
	var exists bool
	if err := m.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	if exists {
		if err := m.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+table).Scan(&database); err != nil {
			return 0, 0, fmt.Errorf("read schema version: %w", err)
		}
	}
	return database, pgstore.SchemaVersion(), nil
}
