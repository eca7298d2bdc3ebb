package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// How often Migrate runs its transaction when PostgreSQL aborts it to break
// a deadlock, and the pause before the first rerun (doubled each time).
// Found by internal/deploytest's rolling upgrade: main's migrations applied
// while hosts of v0.1.0 claimed and fired periodic ticks failed with
// "deadlock detected" in 0003_scale.
const (
	migrateAttempts     = 5
	migrateRetryBackoff = 100 * time.Millisecond
)

// lockTables takes ACCESS EXCLUSIVE locks on every table of the schema
// (jobs first) before a migration of a schema in use changes any: a
// migration that took a weaker lock first (CREATE INDEX's SHARE) and then
// a stronger one on the same table (DROP INDEX, ALTER TABLE) deadlocks
// with every host statement queued behind the weaker one while holding a
// lock of its own on the table. Hosts wait for the migration instead.
func lockTables(ctx context.Context, tx pgx.Tx, schema string) error {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname <> 'jobs', c.relname`, schema)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: list tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("pgstore: migrate: list tables: %w", err)
	}
	if len(names) == 0 {
		return nil
	}
	list := ""
	for i, n := range names {
		if i > 0 {
			list += ", "
		}
		list += pgx.Identifier{schema, n}.Sanitize()
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+list+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("pgstore: migrate: lock tables: %w", err)
	}
	return nil
}
