package pgstore_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store/pgstore"
)

// TestRescueStepsOverFinishedJobs checks what rescueScanSQL is for: the
// index entries of jobs that ran and finished (deleted rows) are read by
// one rescue, and the next rescue steps over them without reading the
// heap again. With a bitmap scan every rescue reads all of them until
// vacuum runs, which at 20,000 jobs/s was 318,115 entries and 18,009 heap
// pages, once a second on every host. It runs the rescue statement as
// RescueExpired does (its settings first) under EXPLAIN ANALYZE, again
// and again, until a rescue reads a fifth of the first's buffers.
func TestRescueStepsOverFinishedJobs(t *testing.T) {
	t.Parallel()
	const finished = 5000
	ctx := ctxT(t)
	pool, s := newPoolStore(t)
	for _, q := range []string{
		// Statistics taken while many jobs ran, as autoanalyze takes them
		// under load: the planner expects many running rows.
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence,
		                      lease_token, lease_expires_at, owner, attempted_at)
		 SELECT gen_random_uuid(), 'k', '{}', 'running', 2, now(), now(), 3, 1, 1,
		        gen_random_uuid(), now() + interval '1 hour', 'rescue-test', now()
		 FROM generate_series(1, $1::int) i`,
		`ANALYZE ax.jobs`,
		// They finish: Finish deletes them (as a job that ends leaves
		// jobs), and vacuum has not run.
		`DELETE FROM ax.jobs`,
		// A few still run, with live leases.
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence,
		                      lease_token, lease_expires_at, owner, attempted_at)
		 SELECT gen_random_uuid(), 'k', '{}', 'running', 2, now(), now(), 3, 1, 1,
		        gen_random_uuid(), now() + interval '1 hour', 'rescue-test', now()
		 FROM generate_series(1, 10) i`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{finished}
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	rescue := s.BatchSQL()["rescue"]
	// rescueHits runs the rescue under EXPLAIN ANALYZE and returns the
	// buffers it hit. A new connection each time: a backend may keep its
	// estimate of the xmin horizon between transactions.
	rescueHits := func(n int) float64 {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var hits float64
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, pgstore.RescueScanSQL); err != nil {
				return err
			}
			var out []byte
			if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+rescue, 1000, "ax").Scan(&out); err != nil {
				return err
			}
			var plans []struct {
				Plan map[string]any `json:"Plan"`
			}
			if err := json.Unmarshal(out, &plans); err != nil {
				return err
			}
			hits, _ = plans[0].Plan["Shared Hit Blocks"].(float64)
			t.Logf("rescue %d: %v shared buffers hit; plan:\n%s", n, hits, indentPlan(plans[0].Plan))
			return errRollback // the rescue rescued nothing; the entries it marked dead stay marked
		})
		if err != errRollback {
			t.Fatal(err)
		}
		return hits
	}
	first := rescueHits(1)
	if first < 50 {
		t.Fatalf("the first rescue hit %v buffers: the finished jobs' entries were not read, the test proves nothing", first)
	}
	// An entry is marked only once its row is dead to every transaction
	// on the server, in any database: while another test (or package)
	// holds a transaction that began before the DELETE, every rescue
	// reads the entries again. So the rescues repeat until one reads a
	// fifth of the first's buffers; with a bitmap or sequential scan none
	// ever does.
	deadline := time.Now().Add(30 * time.Second)
	for n := 2; ; n++ {
		h := rescueHits(n)
		if h <= first/5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rescue %d hit %v buffers against the first's %v, after 30 s of rescues: they read the finished jobs' entries every time", n, h, first)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
