package deploytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestBouncerPruneDetachBounded (issue 41): through PgBouncer in
// transaction mode, a prune's DETACH CONCURRENTLY and FINALIZE under a
// long transaction stop at their bound (a cancel request, which the
// pooler passes to the server connection running the statement), not at
// the caller's context, and leave the day pending; once the transaction
// ends, the next prune drops the day, and the pool still works.
func TestBouncerPruneDetachBounded(t *testing.T) {
	noLeaks(t)
	b := startBouncer(t, pgtest.ServerURL())
	direct := directURL(t)
	pooled := poolOn(t, b.url(t, direct), bouncerMode(), 4)
	dpool := poolOn(t, direct, pgx.QueryExecModeCacheStatement, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := pgstore.New(ctx, pooled, pgstore.WithoutMigrate(), pgstore.WithTransactionPooler())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var now time.Time
	if err := dpool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	day := now.UTC().Truncate(24*time.Hour).AddDate(0, 0, -3)
	part := "ax.jobs_history_p" + day.Format("20060102")
	if _, err := dpool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF ax.jobs_history FOR VALUES FROM ('%s') TO ('%s')`,
		part, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))); err != nil {
		t.Fatal(err)
	}
	if _, err := dpool.Exec(ctx, `INSERT INTO ax.jobs_history (id, kind, priority, run_at, scheduled_at, max_attempts, state, finished_at)
		VALUES (gen_random_uuid(), 'k', 2, now(), now(), 1, 'succeeded', $1)`, day.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	long, err := dpool.Begin(ctx)
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
	params := &store.PruneParams{Retention: now.Sub(day.AddDate(0, 0, 1)), Limit: 10}
	pending := func() bool {
		var p bool
		if err := dpool.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass`, part).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, step := range []string{"DETACH CONCURRENTLY", "FINALIZE"} {
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := s.Prune(pctx, params)
		expired := pctx.Err() != nil
		pcancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) || expired {
			t.Fatalf("%s under a long transaction through the pooler: %v; want it stopped by its own bound", step, err)
		}
		if !pending() {
			t.Fatalf("after the %s was stopped: the day is not pending", step)
		}
	}
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, params); err != nil || n != 1 {
		t.Fatalf("prune after the long transaction: %d, %v; want 1", n, err)
	}
	if _, err := s.Insert(ctx, []store.InsertParams{{ID: uuid.Must(uuid.NewV7()), Kind: "after", Priority: store.PriorityNormal, MaxAttempts: 1}}); err != nil {
		t.Fatalf("insert through the pool after the cancels: %v", err)
	}
}
