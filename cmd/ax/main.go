// Command ax operates an AX cluster from a shell: it lists, retries,
// cancels and deletes jobs by filter, pauses and resumes kinds and
// periodic schedules, opens and closes kinds' circuit breakers, shows
// nodes, the maintenance leader and the queue (with the kinds' flow
// limits and breakers), and migrates the PostgreSQL schema. It needs no running Scheduler: it
// talks to the cluster's database.
//
//	ax [--database-url URL] [--schema ax] [--json] COMMAND [flags] [args]
//
//	ax migrate up [--citus] | status
//	ax jobs list [filters] [--order newest|oldest] [--limit N] [--cursor C] [--preview N]
//	ax jobs count [filters]
//	ax jobs show ID
//	ax jobs retry|cancel|delete [ID...] [filters] [--yes] [--all]
//	ax kinds list | pause KIND [--force] | resume KIND | open KIND | close KIND
//	ax kinds partitions KIND | open-partition KIND KEY | close-partition KIND KEY
//	ax periodic list | pause NAME | resume NAME | trigger NAME [--force]
//	ax nodes
//	ax stats
//	ax serve --keys-file FILE [--addr 127.0.0.1:8080] [--prefix /ax] [--read-only] [--log-format auto|text|json]
//	ax sessions revoke KEY_ID
//
// migrate up --citus, against a Citus coordinator, migrates the schema and
// then distributes it over the cluster (pgstore.MigrateCitus), for
// programs that open it with pgstore.NewCitus. It is one-way; plain
// migrate up then refuses the schema, as the other commands do for now.
//
// A job ID may be given whole or as its first digits (at least 4
// hexadecimal digits, dashes optional, as a table or the dashboard shows
// them: 01a233ed…): the prefix must name exactly one job, however old.
// One that names several is a usage error listing them (up to 10); one
// that names none, not found.
//
// jobs list reads the jobs in brief (ax.ListOptions.PreviewBytes), as the
// HTTP API lists them: of each job its payload's size (SIZE), the first
// --preview bytes of its payload (PAYLOAD; default 64, at most 65536, 0
// leaves the column out) and the start of its latest error, never the
// whole values, so a page of 1,000 jobs with 1 MB payloads reads and
// prints kilobytes, not a gigabyte. jobs show prints one job whole.
//
// jobs show lists the job's attempts, oldest first: each failed one with
// the node that ran it, its start and end (times in UTC to the
// millisecond) and its error, then the running or succeeded latest one.
// Errors recorded by an older AX show "-" for the node and start.
//
// periodic list shows "never" as the LAST TICK of a schedule that has not
// ticked since it was first declared. periodic trigger runs one manual
// run at a time: while the schedule's previous manual run has not ended
// (scheduled, retrying, paused or running) it inserts nothing and names
// that run ("duplicate": true with --json, exit code 0); --force runs
// another. A manual run's metadata has ax.trigger=manual, so its handler
// tells it from a tick's job (ax.Job.Triggered).
//
// Filters (jobs list, count, retry, cancel, delete): --kind, --state, --priority
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
// ax serve writes its log on standard error: lines for people on a
// terminal, one JSON object a line otherwise (a service manager, a pipe, a
// file), never both in one run; --log-format text or json chooses. The
// lines "ax serve: listening on URL/" and "ax serve: stopped" go to
// standard output.
//
// # Output for scripts and exit codes
//
// The --json documents and the exit codes below are part of AX's v1
// compatibility promise: fields may be added to a document, none is
// renamed, removed or changes meaning, and an exit code keeps its
// meaning. Tables and messages for people, and the log of ax serve, may
// change. The repository's .ci/cli-surface lists every field of every
// document with its JSON type, and CI holds later releases to it.
//
// With --json, a command prints exactly one JSON document on standard
// output, whatever it found (an empty list is [], not nothing), and its
// errors go to standard error as text. Times are RFC 3339 strings in UTC
// with the store's precision (microseconds); an unset time is absent, or
// null where the table says so. The documents:
//
//	migrate status           {"database": N, "binary": N, "status": "up-to-date" | "behind" | "ahead"}
//	migrate up               the same, and "before": N, the version it found
//	jobs list                {"jobs": [JOB in brief...], "cursor": C} (cursor absent on the last page)
//	jobs count               {"count": N}
//	jobs show                JOB
//	jobs retry|cancel|delete {"operation": "retry" | "cancel" | "delete", "matched": N, "changed": N}
//	jobs reencrypt           {"key", "scanned", "resealed", "changed", "unopenable", "sealed", "left_plain", "last"}
//	keys usage               [{"key", "jobs", "schedules", "batches", "in_ring"}...]
//	keys remove              {"key": ID, "file": PATH}
//	kinds list               {"kinds": [ax.KindState...]}
//	kinds pause|resume       ax.KindState
//	kinds open|close         ax.FlowState
//	kinds partitions         {"partitions": [ax.PartitionBreakerState...]}
//	kinds open-partition|close-partition ax.PartitionBreakerState
//	periodic list            {"schedules": [SCHEDULE...]}
//	periodic pause|resume    SCHEDULE
//	periodic trigger         {"schedule": NAME, "job_id": ID, "duplicate": BOOL}
//	nodes                    {"nodes": [ax.Node...], "leader": ax.Leader or null}
//	stats                    ax.Stats
//	sessions revoke          {"key": KEY_ID, "revoked_at": TIME}
//
// JOB is ax.JobRecord as encoding/json writes it (the tags of
// store.JobRecord): "id", "kind", "payload" (the JSON as scheduled, or
// a sealed value's envelope without --encryption-keys), "metadata",
// "state", "priority" (1 high, 2 normal, 3 low), "run_at", "attempt",
// "max_attempts", "errors" ([{"attempt", "at", "error", "node",
// "started_at"}...], oldest first), "owner", "created_at",
// "attempted_at", "finished_at", "result", among others. JOB in brief
// is the same with "payload" and "result" null, "errors" the latest only
// (its first 256 bytes, or --preview's when more), no "follow_ups", and
// "brief": {"payload": the first --preview bytes of the payload's text,
// "payload_size", "result", "result_size", "errors", "follow_ups"} (the
// counts), as GET /api/v1/jobs lists jobs. SCHEDULE is
// ax.Schedule: "name", "spec", "time_zone", "kind", "last_tick" (null
// until the schedule's first tick), "next_tick", "paused", "updated_at",
// "job". Documents named by a type are that type's JSON encoding.
// ax serve prints no JSON document (its API is package axhttp's).
//
// Exit codes:
//
//	0  success, including nothing to do: no job matched a bulk change, a
//	   kind or schedule already paused, a trigger while the previous
//	   manual run has not ended ("duplicate": true)
//	1  error: the database failed or refused (a SQLite file a service
//	   holds refuses changes), no AX schema in the database, the user
//	   declined a confirmation
//	2  usage: unknown command or flag, invalid value, malformed cursor, a
//	   bulk change without --yes off a terminal, a job ID prefix several
//	   jobs share
//	3  not found: a job (or no job for an ID prefix), kind, schedule or
//	   encryption key
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
	st, err := openPG(ctx, pool, c.schema)
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

// pgStore is what the CLI's commands need of either PostgreSQL store.
type pgStore interface {
	store.Store
	Close() error
}

// openPG opens the schema with pgstore.New, or with pgstore.NewCitus when
// MigrateCitus distributed it over a Citus cluster (pgstore.New refuses
// such a schema with ErrDistributed): an operator's commands then read
// and change the jobs of every shard through the coordinator, as far as
// the Citus store implements them.
func openPG(ctx context.Context, pool *pgxpool.Pool, schema string) (pgStore, error) {
	st, err := pgstore.New(ctx, pool, pgstore.WithSchema(schema), pgstore.WithoutMigrate())
	switch {
	case errors.Is(err, pgstore.ErrDistributed):
		return pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	case err != nil:
		return nil, err
	}
	return st, nil
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

// UpCitus migrates and distributes the schema with pgstore.MigrateCitus.
func (m pgMigrator) UpCitus(ctx context.Context, shards int) error {
	return pgstore.MigrateCitus(ctx, m.pool, pgstore.WithSchema(m.schema), pgstore.WithCitusShards(shards))
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
