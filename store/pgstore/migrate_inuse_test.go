package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// TestMigrateInUseNoDeadlock: a migration of a schema in use must not
// deadlock with a host's transaction. A host (here a transaction that read
// ax.jobs and then inserts into it, as one of 0.1.0 claimed and fired
// periodic ticks) holds a lock on jobs; 0003's CREATE INDEX then DROP
// INDEX on jobs used to take SHARE, wait for ACCESS EXCLUSIVE behind the
// host, and have the host's insert wait behind its SHARE: "deadlock
// detected" (internal/deploytest's rolling upgrade found it). Now the
// migration waits for the host, and both succeed.
func TestMigrateInUseNoDeadlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
	ctx := ctxT(t)
	if err := pgstore.MigrateTo(ctx, pool, 2); err != nil {
		t.Fatal(err)
	}
	host, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Rollback(context.Background()) //nolint:errcheck
	var hostPID int
	if err := host.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT count(*) FROM ax.jobs) j`).Scan(&hostPID); err != nil {
		t.Fatal(err)
	}

	migrated := make(chan error, 1)
	go func() { migrated <- pgstore.Migrate(ctx, pool) }()
	// Wait until the migration waits for the host's lock.
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname = 'jobs' AND l.pid <> $1)`, hostPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-migrated:
			t.Fatalf("Migrate returned %v while a host held ax.jobs", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, err = host.Exec(ctx, `INSERT INTO ax.jobs (id, kind, priority, run_at, scheduled_at, max_attempts) VALUES (gen_random_uuid(), 'k', 2, now(), now(), 1)`)
	if err != nil {
		t.Fatalf("the host's insert during the migration: %v", err)
	}
	if err := host.Commit(ctx); err != nil {
		t.Fatalf("the host's commit: %v", err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT max(version) FROM ax.schema_version`).Scan(&v); err != nil || v != pgstore.SchemaVersion() {
		t.Fatalf("schema at %d (%v), want %d", v, err, pgstore.SchemaVersion())
	}
}
