package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/deadlockretry"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrSchemaTooNew means the database's schema was migrated by a newer
// version of this package than the running one. Migrate changes nothing;
// upgrade the code (or point it at another schema).
var ErrSchemaTooNew = errors.New("pgstore: database schema is newer than this code")

// ErrNoSchema means the schema holds no AX tables (no schema_version
// table, or no such schema): the connection names the wrong database or
// schema, or Migrate never ran on it. New with WithoutMigrate returns it.
var ErrNoSchema = errors.New("pgstore: no AX schema here: wrong database, or run Migrate")

type migration struct {
	version int
	name    string
	sql     string
	// compatibleFrom is the oldest schema version whose code runs against
	// the schema this migration leaves (compatibleFromDirective); without
	// the directive, the migration's own version: older code refuses it.
	compatibleFrom int
}

// compatibleFromDirective, on a line of its own in a migration file
// ("-- ax:compatible-from 13"), says that code which knows schema version
// 13 (or later) keeps working on the schema this migration leaves: the
// migration only adds what older code ignores (a nullable column, an
// index, a table), so a rolling deploy may apply it while older hosts run
// and older hosts may start after it. Migrations without it are breaking:
// code older than them refuses the schema with ErrSchemaTooNew. Migrate
// records each migration's value in schema_version.compatible_from, which
// is how code that does not know a migration learns whether it may run.
const compatibleFromDirective = "-- ax:compatible-from "

// migrations returns the embedded migrations in version order. Files are
// named NNNN_description.sql, numbered from 1 without gaps.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("pgstore: bad migration file name %q", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		m := migration{version: v, name: e.Name(), sql: string(b), compatibleFrom: v}
		for _, line := range strings.Split(m.sql, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), compatibleFromDirective); ok {
				from, err := strconv.Atoi(strings.TrimSpace(rest))
				if err != nil || from < 1 || from > v {
					return nil, fmt.Errorf("pgstore: migration %s: bad %q line", e.Name(), strings.TrimSpace(line))
				}
				m.compatibleFrom = from
			}
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("pgstore: migration %s out of sequence", m.name)
		}
	}
	return ms, nil
}

// SchemaVersion is the schema version this package migrates to.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate brings the schema (DefaultSchema, or the one named by WithSchema)
// to SchemaVersion, creating it when missing. It is idempotent and safe to
// run from many hosts at once: everything happens in one transaction that
// first takes a transaction-level advisory lock keyed by the schema name, so
// concurrent callers wait for the first and then find nothing to do. Applied
// versions are recorded in the schema's schema_version table. A schema
// that MigrateCitus distributed is refused, unchanged, with an error
// wrapping ErrDistributed.
//
// Applied to a database in use, the migrations' locks can deadlock with
// hosts' transactions (a host of an older release holding one table and
// waiting for another that a migration holds); when PostgreSQL picks the
// migration as the deadlock's victim, its transaction is rolled back whole
// and Migrate runs it again, up to migrateAttempts times (deadlockretry.Run).
//
// A schema recorded at a version newer than SchemaVersion is left as it is.
// Migrate returns nil when every newer migration says this code may run on
// it (compatibleFromDirective: the additive migrations of later v1
// releases do), and an error wrapping ErrSchemaTooNew otherwise. Other
// options than WithSchema are ignored.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	return deadlockretry.Run(ctx, migrateAttempts, migrateRetryBackoff, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return migrateTx(ctx, tx, o.schema, ms)
		})
	})
}

func migrateTx(ctx context.Context, tx pgx.Tx, schema string, ms []migration) error {
	latest := ms[len(ms)-1].version
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "ax.migrate."+schema); err != nil {
		return fmt.Errorf("pgstore: migrate: lock: %w", err)
	}
	if err := refuseDistributed(ctx, tx, schema); err != nil {
		return err
	}
	s := pgx.Identifier{schema}.Sanitize()
	var current int
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s+".schema_version").Scan(&exists); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if exists {
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s+`.schema_version`).Scan(&current); err != nil {
			return fmt.Errorf("pgstore: migrate: read version: %w", err)
		}
	}
	if current > latest {
		// A newer binary migrated; this one runs if every migration it
		// does not know says it may.
		return newerSchema(ctx, tx, schema, current, latest)
	}
	if current == latest {
		return nil
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s+`;
CREATE TABLE IF NOT EXISTS `+s+`.schema_version (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return fmt.Errorf("pgstore: migrate: create schema %s: %w", schema, err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, s+", pg_catalog"); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if exists {
		if err := lockTables(ctx, tx, schema); err != nil {
			return err
		}
	}
	for _, m := range ms[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("pgstore: migrate: apply %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s+`.schema_version (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("pgstore: migrate: record %s: %w", m.name, err)
		}
	}
	// compatible_from comes with a migration of its own, so it is written
	// once every migration of this run is in (and not at all by a run that
	// stops short of it, as tests of older schemas do).
	var recorded bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = $1::regclass AND attname = 'compatible_from' AND NOT attisdropped)`, s+".schema_version").Scan(&recorded); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	for _, m := range ms[current:] {
		if !recorded {
			break
		}
		if _, err := tx.Exec(ctx, `UPDATE `+s+`.schema_version SET compatible_from = $2 WHERE version = $1`, m.version, m.compatibleFrom); err != nil {
			return fmt.Errorf("pgstore: migrate: record %s: %w", m.name, err)
		}
	}
	return nil
}

// newerSchema decides whether code that knows schema versions up to latest
// may run on a schema at version current > latest: only if no migration
// it does not know is breaking (compatible_from above latest). A schema
// migrated before compatible_from existed has no such column; nothing in
// it is newer than this code, so that case does not arise here.
func newerSchema(ctx context.Context, q querier, schema string, current, latest int) error {
	s := pgx.Identifier{schema}.Sanitize()
	var needs int
	err := q.QueryRow(ctx, `SELECT coalesce(max(coalesce(compatible_from, version)), 0) FROM `+s+`.schema_version WHERE version > $1`, latest).Scan(&needs)
	if err != nil {
		return fmt.Errorf("pgstore: read schema %q's compatibility: %w", schema, err)
	}
	if needs > latest {
		return fmt.Errorf("%w: schema %q is at version %d and needs code that knows version %d or later; this code knows up to %d",
			ErrSchemaTooNew, schema, current, needs, latest)
	}
	return nil
}

// checkVersion reports whether the schema is at exactly SchemaVersion
// (for WithoutMigrate).
func checkVersion(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := refuseDistributed(ctx, pool, schema); err != nil {
		return err
	}
	s := pgx.Identifier{schema}.Sanitize()
	var current int
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s+`.schema_version`).Scan(&current)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined_table, invalid_schema_name
		return fmt.Errorf("%w (schema %q has no schema_version table)", ErrNoSchema, schema)
	}
	if err != nil {
		return fmt.Errorf("pgstore: read schema version of %q: %w", schema, err)
	}
	switch latest := SchemaVersion(); {
	case current > latest:
		return newerSchema(ctx, pool, schema, current, latest)
	case current < latest:
		return fmt.Errorf("pgstore: schema %q is at version %d, this code needs %d: run Migrate", schema, current, latest)
	}
	return nil
}
