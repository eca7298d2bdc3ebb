package pgstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/deadlockretry"
	"github.com/axsched/ax/store"
)

// distributeSQL is the Citus step: see the file's comments.
//
//go:embed citus/distribute.sql
var distributeSQL string

// citusStep is the last Citus step this package knows (citus_steps.step).
const citusStep = 1

// MigrateCitus prepares a schema (DefaultSchema, or the one named by
// WithSchema) of a Citus coordinator's database for NewCitus: it applies
// the numbered migrations as Migrate does, then the Citus step, in one
// transaction: it drops the triggers of the features the Citus store
// refuses (follow-up templates, batches, flow control, sequences), adds
// the distribution column shard to jobs and jobs_history (part of every
// unique index), distributes both tables by it, co-located, and records
// the slots (one value of shard per Citus shard) that NewCitus places
// jobs with. Every other table stays a plain table of the coordinator.
//
// The step is one-way: a distributed schema is refused by New and by
// Migrate (ErrDistributed). MigrateCitus is idempotent and safe to run
// from many hosts at once (the same advisory lock as Migrate). It takes
// the advisory lock, reads and writes nothing, and returns an error
// wrapping ErrNotCitus, ErrNotCoordinator or ErrCitusVersion when the
// database is not a Citus coordinator of a supported version. On a schema
// that holds jobs, and on a distributed schema that the numbered
// migrations of a newer release would change, it changes nothing and
// returns an error wrapping ErrCitusUnsupported: this version distributes
// empty schemas only, and no migration after the Citus step has been
// written for a distributed schema yet. Other options than WithSchema are
// ignored.
//
// Distribution is a separate call from Migrate, never a guess from the
// server it runs on: a Citus coordinator is also a plain PostgreSQL, on
// which pgstore.New runs with every feature, and distributing takes
// features away.
func MigrateCitus(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	if o.citusShards < 0 || o.citusShards > 1<<16 {
		return fmt.Errorf("pgstore: MigrateCitus: %d shards, want 1 to 65536: %w", o.citusShards, store.ErrInvalidParams)
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	if err := checkCitus(ctx, pool, "MigrateCitus on "+poolAddr(pool)); err != nil {
		return err
	}
	return deadlockretry.Run(ctx, migrateAttempts, migrateRetryBackoff, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if o.citusShards > 0 {
				if _, err := tx.Exec(ctx, `SELECT set_config('citus.shard_count', $1, true)`, fmt.Sprint(o.citusShards)); err != nil {
					return fmt.Errorf("pgstore: migrate for Citus: shard count: %w", err)
				}
			}
			return migrateCitusTx(ctx, tx, o.schema, ms)
		})
	})
}

// WithCitusShards makes MigrateCitus distribute jobs and their history
// over n shards (Citus's citus.shard_count; without it, the cluster's
// setting, 32 by default). Each shard is a slot of the Citus store, the
// unit that hosts claim from; a schema's shard count stays as it was
// distributed. n must be 1 to 65,536. Other functions ignore it.
func WithCitusShards(n int) Option {
	return optionFunc(func(o *options) { o.citusShards = n })
}

func migrateCitusTx(ctx context.Context, tx pgx.Tx, schema string, ms []migration) error {
	// Citus propagates DDL to the workers over several connections per
	// node unless told to use one; the step creates the schema's types
	// and functions and distributes tables in one transaction, which
	// Citus allows only in sequential mode.
	if _, err := tx.Exec(ctx, `SET LOCAL citus.multi_shard_modify_mode = 'sequential'`); err != nil {
		return fmt.Errorf("pgstore: migrate for Citus: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "ax.migrate."+schema); err != nil {
		return fmt.Errorf("pgstore: migrate for Citus: lock: %w", err)
	}
	distributed, err := isDistributed(ctx, tx, schema)
	if err != nil {
		return fmt.Errorf("pgstore: migrate for Citus: %w", err)
	}
	if distributed {
		return checkCitusVersion(ctx, tx, schema)
	}
	if err := migrateTx(ctx, tx, schema, ms); err != nil {
		return err
	}
	s := pgx.Identifier{schema}.Sanitize()
	var full bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s+`.jobs) OR EXISTS (SELECT 1 FROM `+s+`.jobs_history)`).Scan(&full); err != nil {
		return fmt.Errorf("pgstore: migrate for Citus: %w", err)
	}
	if full {
		return fmt.Errorf("pgstore: migrate schema %q for Citus: it holds jobs, and this version distributes empty schemas only: %w", schema, ErrCitusUnsupported)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, s+", pg_catalog"); err != nil {
		return fmt.Errorf("pgstore: migrate for Citus: %w", err)
	}
	if _, err := tx.Exec(ctx, distributeSQL); err != nil {
		return fmt.Errorf("pgstore: migrate schema %q for Citus: distribute: %w", schema, err)
	}
	return nil
}

// checkCitusVersion reports whether the distributed schema is at this
// package's numbered and Citus versions: a schema behind either needs a
// migration this version cannot apply to a distributed schema, one ahead
// needs newer code.
func checkCitusVersion(ctx context.Context, q querier, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	var version, step int
	err := q.QueryRow(ctx, `SELECT (SELECT coalesce(max(version), 0) FROM `+s+`.schema_version),
		(SELECT coalesce(max(step), 0) FROM `+s+`.citus_steps)`).Scan(&version, &step)
	if err != nil {
		return fmt.Errorf("pgstore: read the versions of distributed schema %q: %w", schema, err)
	}
	latest := SchemaVersion()
	switch {
	case version > latest || step > citusStep:
		return fmt.Errorf("%w: distributed schema %q is at version %d, Citus step %d; this code knows up to %d, step %d",
			ErrSchemaTooNew, schema, version, step, latest, citusStep)
	case version < latest:
		return fmt.Errorf("pgstore: distributed schema %q is at version %d, this code needs %d, and no migration after the Citus step is written for a distributed schema yet: %w",
			schema, version, latest, ErrCitusUnsupported)
	case step < citusStep:
		return fmt.Errorf("pgstore: distributed schema %q is at Citus step %d, this code needs %d: %w", schema, step, citusStep, ErrCitusUnsupported)
	}
	return nil
}
