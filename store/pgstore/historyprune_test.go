package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// historyDays archives one finished job for each of the days given (as
// offsets from today, UTC) and returns the database's now and today.
func historyDays(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, days ...int) (now, today time.Time) {
	t.Helper()
	ctx := ctxT(t)
	outcomes := make([]store.Outcome, len(days))
	for i := range outcomes {
		outcomes[i] = store.OutcomeSucceeded
	}
	ids := finishAs(t, s, "k", outcomes, "", store.UniqueScope{})
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	today = now.UTC().Truncate(24 * time.Hour)
	for i, d := range days {
		if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET finished_at = $2 WHERE id = $1`, [16]byte(ids[i]), today.AddDate(0, 0, d)); err != nil {
			t.Fatal(err)
		}
	}
	if n := archiveAll(t, s); n != len(days) {
		t.Fatalf("archived %d, want %d", n, len(days))
	}
	return now, today
}

// dayTable returns the name of the history partition of day.
func dayTable(day time.Time) string { return "jobs_history_p" + day.Format("20060102") }

// tableExists reports whether schema.name exists.
func tableExists(t *testing.T, pool *pgxpool.Pool, schema, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(ctxT(t), `SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL`, schema, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestPruneDropsLeftDetachedPartitions (issue 41): a day's partition
// whose DETACH committed without the DROP after it (any failure between
// the two statements) is no longer listed in pg_inherits, and Prune,
// which listed partitions from there only, never dropped it: its jobs
// stayed past the retention for good. Prune now drops such a table once
// its day is past the retention, and leaves alone every table that is not
// one of the Store's partitions: another schema's, one of other columns,
// one of another name, one whose name is no day.
func TestPruneDropsLeftDetachedPartitions(t *testing.T) {
	t.Parallel()
	s, pool := historyStore(t)
	ctx := ctxT(t)
	now, today := historyDays(t, s, pool, -4, -3, 0)
	left := dayTable(today.AddDate(0, 0, -4))
	// The state a failure between DETACH and DROP leaves.
	if _, err := pool.Exec(ctx, `ALTER TABLE ax.jobs_history DETACH PARTITION ax.`+left); err != nil {
		t.Fatal(err)
	}
	old := dayTable(today.AddDate(0, 0, -5))
	for _, sql := range []string{
		`CREATE TABLE ax.` + old + ` (x int)`,                     // AX's name, other columns
		`CREATE SCHEMA other`,                                     //
		`CREATE TABLE other.` + old + ` (LIKE ax.jobs_history)`,   // another schema
		`CREATE TABLE ax.jobs_history_old (LIKE ax.jobs_history)`, // another name
		`CREATE TABLE ax.jobs_history_p20200230 (LIKE ax.jobs_history)`,
		`CREATE TABLE ax.jobs_history_p020200101 (LIKE ax.jobs_history)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Another host prunes: the retention reaches into day -2.
	n, err := s.Prune(ctx, &store.PruneParams{Retention: now.Sub(today.AddDate(0, 0, -2)), Limit: 10})
	if err != nil || n != 2 {
		t.Fatalf("prune: %d, %v; want 2 (the left detached day and day -3)", n, err)
	}
	for _, tbl := range []struct {
		schema, name string
		want         bool
	}{
		{"ax", left, false},
		{"ax", dayTable(today.AddDate(0, 0, -3)), false},
		{"ax", dayTable(today), true},
		{"ax", old, true},
		{"other", old, true},
		{"ax", "jobs_history_old", true},
		{"ax", "jobs_history_p20200230", true},
		{"ax", "jobs_history_p020200101", true},
	} {
		if got := tableExists(t, pool, tbl.schema, tbl.name); got != tbl.want {
			t.Errorf("%s.%s exists: %v, want %v", tbl.schema, tbl.name, got, tbl.want)
		}
	}
}

// TestPruneKeepsLeftDetachedPartitionWithinRetention: a day left detached
// whose day is not wholly past the retention is not dropped.
func TestPruneKeepsLeftDetachedPartitionWithinRetention(t *testing.T) {
	t.Parallel()
	s, pool := historyStore(t)
	ctx := ctxT(t)
	now, today := historyDays(t, s, pool, -2)
	left := dayTable(today.AddDate(0, 0, -2))
	if _, err := pool.Exec(ctx, `ALTER TABLE ax.jobs_history DETACH PARTITION ax.`+left); err != nil {
		t.Fatal(err)
	}
	// The retention boundary falls inside day -2.
	if _, err := s.Prune(ctx, &store.PruneParams{Retention: now.Sub(today.AddDate(0, 0, -2).Add(time.Hour)), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if !tableExists(t, pool, "ax", left) {
		t.Fatal("a detached day within the retention was dropped")
	}
}

// TestPruneDetachIsBounded (issue 41): DETACH CONCURRENTLY waits for the
// transactions holding a lock on jobs_history, and FINALIZE for every
// older snapshot while it holds jobs_history's SHARE UPDATE EXCLUSIVE
// lock. Unbounded, a prune under a long transaction waited as long as
// its context let it (the runtime's 30 s: the leader's maintenance loop
// stalled), and the next day's ATTACH PARTITION, queued behind the
// FINALIZE, failed on its 2 s lock timeout. Each now stops after the
// Store's detach bound, the next prune tries again, and an ATTACH meanwhile
// waits at most that bound.
func TestPruneDetachIsBounded(t *testing.T) {
	t.Parallel()
	s, pool := historyStore(t)
	ctx := ctxT(t)
	s.SetDetachTimeout(time.Second) // below the ATTACH's 2 s lock timeout
	now, today := historyDays(t, s, pool, -3)
	expired := dayTable(today.AddDate(0, 0, -3))
	params := &store.PruneParams{Retention: now.Sub(today.AddDate(0, 0, -2)), Limit: 10}

	// A long transaction with an old snapshot that read the history.
	long, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(context.Background())
	if _, err := long.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, `SELECT count(*) FROM ax.jobs_history`); err != nil {
		t.Fatal(err)
	}

	// The runtime gives a prune 30 s; the test gives it 20.
	bounded := func() error {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := s.Prune(pctx, params)
		return err
	}
	// The detach stops in its wait: the partition is left pending.
	if err := bounded(); !errors.Is(err, pgstore.ErrDetachTimeout) {
		t.Fatalf("prune under a long transaction: %v; want its detach cut short by its bound", err)
	}
	var pending bool
	if err := pool.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass`, "ax."+expired).Scan(&pending); err != nil || !pending {
		t.Fatalf("partition pending: %v, %v; want pending", pending, err)
	}

	// The next prune's FINALIZE waits for the old snapshot, and the next
	// day's partition is attached meanwhile: a job finished yesterday,
	// archived (its partition does not exist yet).
	pruned := make(chan error, 1)
	go func() { pruned <- bounded() }()
	waitFor(t, pool, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE query LIKE '%DETACH PARTITION%FINALIZE%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid())`)
	if _, err := pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, priority, run_at, scheduled_at, max_attempts, state, finished_at)
		VALUES (gen_random_uuid(), 'k', 2, now(), now(), 1, 'succeeded', $1)`, today.AddDate(0, 0, -1)); err != nil {
		t.Fatal(err)
	}
	s.RewindArchive()
	if n, err := s.Archive(ctx, 10); err != nil || n != 1 {
		t.Fatalf("archive into a new day while a FINALIZE waits: %d, %v", n, err)
	}
	if err := <-pruned; !errors.Is(err, pgstore.ErrDetachTimeout) {
		t.Fatalf("prune (FINALIZE) under a long transaction: %v; want it cut short by its bound", err)
	}

	// Once the transaction ends, the next prune finishes the detach.
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, params); err != nil || n != 1 {
		t.Fatalf("prune after the long transaction: %d, %v; want 1", n, err)
	}
	if tableExists(t, pool, "ax", expired) {
		t.Fatal("the expired partition is still there")
	}
}

// waitFor polls the boolean query until it is true.
func waitFor(t *testing.T, pool *pgxpool.Pool, query string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		var ok bool
		if err := pool.QueryRow(ctx, query).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never true: %s", query)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
