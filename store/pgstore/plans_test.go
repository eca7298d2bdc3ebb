package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// planRows is how many rows of each kind of job the plans test puts in the
// table: due, running (with expired leases) and finished.
const planRows = 3000

// TestGenericPlansAreLinear runs every batched statement of the Store on
// one connection with plan_cache_mode = force_generic_plan (the plan pgx's
// cached prepared statements get after five executions), at batches of 100
// and 1,000 rows, on a table of 9,000 jobs whose statistics either
// predate its live jobs or are those of a drained queue (planStats, see
// fillForPlans), and reads each execution's plan with auto_explain
// (ANALYZE, JSON, sent back as a notice). A statement is linear when its
// work, the rows every plan node produced or threw away summed over its
// loops, grows at most 15 times from 100 to 1,000 rows, no plan node at
// 1,000 rows threw away more than 10 rows per input row in a filter or
// join filter, and no scan of jobs read more than 4 rows per input row
// (readsAll names the exceptions). A nested loop comparing every input row
// with every other, as the Finish statement's generic plan once did (Rows
// Removed by Join Filter: 999,000 at 1,000 rows), fails the first two; a
// probe per input row that scans a whole partial index instead of the
// primary key (the planner's choice when stale statistics call that index
// empty) fails the second; a join that scans jobs once per input row
// (Finish's on a drained queue's statistics) fails the second, and one
// that hashes all of jobs once per statement (ExtendLeases' there) the
// third. Each execution is rolled back.
func TestGenericPlansAreLinear(t *testing.T) {
	t.Parallel()
	planTest(t, "fills a table and runs every batched statement under EXPLAIN ANALYZE")
	for _, stats := range []planStats{staleStats, drainedStats} {
		t.Run(stats.String(), func(t *testing.T) {
			t.Parallel()
			testGenericPlansAreLinear(t, stats)
		})
	}
}

func testGenericPlansAreLinear(t *testing.T, stats planStats) {
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.PoolFor(t, dsn)
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fillForPlans(ctx, t, pool.Exec, stats)

	conn, notices := connectLogged(ctx, t, dsn)
	for _, q := range append(autoExplainSQL[:len(autoExplainSQL):len(autoExplainSQL)],
		`SET auto_explain.log_buffers = on`,
		`SET plan_cache_mode = force_generic_plan`,
		// The flow claim reads it when its $11 is NULL, which planning
		// evaluates too; the case passes $11.
		`SELECT set_config('ax.flow_now', now()::text, false)`,
	) {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	sqls := s.BatchSQL()
	for _, c := range planCases(pool, sqls) {
		t.Run(c.name, func(t *testing.T) {
			sql := sqls[c.name]
			if c.sql != "" {
				sql = sqls[c.sql]
			}
			work := map[int]planWork{}
			for _, n := range []int{100, 1000} {
				args := c.args(ctx, t, conn, n)
				before := ""
				if c.name == "rescue" { // as RescueExpired runs it
					before = pgstore.RescueScanSQL
				}
				notices.take()
				if err := runRolledBack(ctx, conn, before, sql, args...); err != nil {
					t.Fatalf("n=%d: %v", n, err)
				}
				plan := planOf(t, notices.messages(), sql)
				work[n] = measure(plan)
				t.Logf("n=%d: work %d, most rows one node filtered out %d, most rows one scan of jobs read %d, %v shared buffers hit, %v dirtied; plan:\n%s",
					n, work[n].total, work[n].filtered, work[n].jobsRead, plan["Shared Hit Blocks"], plan["Shared Dirtied Blocks"], indentPlan(plan))
				checkJobsRead(t, n, work[n], readsAll[c.name] != "")
			}
			var generic int64
			err := conn.QueryRow(ctx, `SELECT coalesce(max(generic_plans), 0) FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&generic)
			if err != nil {
				t.Fatal(err)
			}
			if generic < 2 {
				t.Fatalf("%d generic plans, want 2: the statement was not planned generically", generic)
			}
			checkLinear(t, work, 100, 1000)
		})
	}
}

// runRolledBack runs sql with args on conn, after before (none when "")
// in the same transaction, reads its rows and rolls the transaction back.
func runRolledBack(ctx context.Context, conn *pgx.Conn, before, sql string, args ...any) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if before != "" {
			if _, err := tx.Exec(ctx, before); err != nil {
				return err
			}
		}
		rows, _ := tx.Query(ctx, sql, args...)
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return errRollback
	})
	if err == errRollback {
		return nil
	}
	return err
}

// checkJobsRead fails t when, at a batch of n rows, one scan of jobs read
// more than 4 rows per input row, unless the statement may (exempt:
// readsAll).
func checkJobsRead(t *testing.T, n int, w planWork, exempt bool) {
	t.Helper()
	if r := w.jobsRead; r > 4*int64(n)+10 && !exempt {
		t.Errorf("n=%d: a scan of jobs read %d rows (> 4 per row): a scan of the table, not of the batch's rows", n, r)
	}
}

// checkLinear fails t when a statement's work at a batch of large rows is
// not linear in the batch: a plan node that filtered out more than 10
// rows per input row, or work more than 15 times that at small rows (ten
// times fewer).
func checkLinear(t *testing.T, work map[int]planWork, small, large int) {
	t.Helper()
	if w := work[large].filtered; w > 10*int64(large) {
		t.Errorf("at %d rows a plan node filtered out %d rows (> 10 per row): a loop over the batch or a table scan per row", large, w)
	}
	if r := float64(work[large].total) / float64(max(work[small].total, 1)); r > 15 {
		t.Errorf("work grew %.1f× from %d to %d rows (%d → %d), want ≤ 15×", r, small, large, work[small].total, work[large].total)
	}
}

// noticeLog collects a connection's notices.
type noticeLog struct {
	mu  sync.Mutex
	all []*pgconn.Notice
}

func (l *noticeLog) add(_ *pgconn.PgConn, n *pgconn.Notice) {
	l.mu.Lock()
	l.all = append(l.all, n)
	l.mu.Unlock()
}

// take returns the notices since the last take.
func (l *noticeLog) take() []*pgconn.Notice {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := l.all
	l.all = nil
	return all
}

// messages returns the messages of the notices since the last take.
func (l *noticeLog) messages() []string {
	var m []string
	for _, n := range l.take() {
		m = append(m, n.Message)
	}
	return m
}

// connectLogged connects to url with notices sent to a new noticeLog,
// closed when t ends.
func connectLogged(ctx context.Context, t *testing.T, url string) (*pgx.Conn, *noticeLog) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	log := &noticeLog{}
	cfg.OnNotice = log.add
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, log
}

// autoExplainSQL makes a session log the plan of every statement it runs,
// with what each node did, as a JSON notice to the client (planOf).
var autoExplainSQL = []string{
	`LOAD 'auto_explain'`,
	`SET auto_explain.log_min_duration = 0`,
	`SET auto_explain.log_analyze = on`,
	`SET auto_explain.log_timing = off`,
	`SET auto_explain.log_format = json`,
	`SET auto_explain.log_level = notice`,
}

// leasesOf returns the IDs and lease tokens of the first n running jobs
// of table (schema-qualified) in ID order.
func leasesOf(ctx context.Context, t *testing.T, conn *pgx.Conn, table string, n int) ([][16]byte, [][16]byte) {
	t.Helper()
	rows, _ := conn.Query(ctx, `SELECT id, lease_token FROM `+table+` WHERE state = 'running' ORDER BY id LIMIT $1`, n)
	var ids, tokens [][16]byte
	var id, token [16]byte
	_, err := pgx.ForEachRow(rows, []any{&id, &token}, func() error {
		ids, tokens = append(ids, id), append(tokens, token)
		return nil
	})
	if err != nil || len(ids) != n {
		t.Fatalf("leases: %d of %d: %v", len(ids), n, err)
	}
	return ids, tokens
}

// readsAll names the statements that may read more of jobs than a few
// rows per batch row, and why.
var readsAll = map[string]string{
	"rescue": "every running job, through jobs_busy_idx: no index holds lease_expires_at (migration 0003), and the running jobs are as many as the hosts' workers, not the table's rows",
}

type planCase struct {
	name string
	sql  string // the BatchSQL statement, when not name
	args func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any
}

// planCases are the statements TestGenericPlansAreLinear runs, from sqls
// (Store.BatchSQL); pool is another connection to the same database, for
// a claim held beside one.
func planCases(pool *pgxpool.Pool, sqls map[string]string) []planCase {
	var rollback func() // the held claim of claimBesideHeld's last n
	claimArgs := func(n int, owner string) []any {
		return []any{[]string{"due"}, []int32{int32(n)}, int32(n), owner, int64(60e6), int64(60e6), nil, int64(10e3)}
	}
	leases := func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) ([][16]byte, [][16]byte) {
		return leasesOf(ctx, t, conn, "ax.jobs", n)
	}
	// holdClaim makes a claim of n jobs in a transaction left open on
	// another connection, after rolling back the one it made before.
	holdClaim := func(ctx context.Context, t *testing.T, n int) {
		if rollback != nil {
			rollback()
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rollback = func() { _ = tx.Rollback(context.Background()) }
		t.Cleanup(rollback)
		rows, _ := tx.Query(ctx, sqls["claim"], claimArgs(n, "holder")...)
		held := 0
		for rows.Next() {
			held++
		}
		if err := rows.Err(); err != nil || held != n {
			t.Fatalf("the held claim took %d jobs of %d: %v", held, n, err)
		}
	}
	return []planCase{
		{"claim", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return claimArgs(n, "plans")
		}},
		// The claim beside another claim of n jobs held open on another
		// connection: it loses all n to the held locks.
		{"claimBesideHeld", "claim", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			holdClaim(ctx, t, n)
			return claimArgs(n, "plans")
		}},
		// The open claim (a kind whose limit does not bind), reading no
		// spare rows, and beside a claim of n jobs held open, reading n
		// spare rows: it steps over the n held rows and locks n others.
		{"claimOpen", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return append(claimArgs(n, "plans"), int64(0))
		}},
		{"claimOpenBesideHeld", "claimOpen", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			holdClaim(ctx, t, n)
			return append(claimArgs(n, "plans"), int64(n))
		}},
		// The claim of one kind, alone and beside a claim of n jobs held
		// open: it steps over the n held rows and locks n others.
		{"claimOne", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{"due", int32(n), nil, "plans", int64(60e6), int64(10e3), int64(0)}
		}},
		{"claimOneBesideHeld", "claimOne", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			holdClaim(ctx, t, n)
			return []any{"due", int32(n), nil, "plans", int64(60e6), int64(10e3), int64(0)}
		}},
		// With priority aging, every due job aged: one priority, so
		// aging does not mix the ranges and the statement claims.
		{"claimOneAging", "claimOne", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{"due", int32(n), nil, "plans", int64(60e6), int64(10e3), int64(1)}
		}},
		// Its second round (claimLost): the walk steps over the n held
		// rows, two probes each, and locks n others.
		{"claimLostBesideHeld", "claimLost", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			holdClaim(ctx, t, n)
			return append(claimArgs(n, "plans"), time.Now(), int32(n))
		}},
		{"finish", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids, tokens := leases(ctx, t, conn, n)
			outcomes := make([]int32, n)
			delays := make([]int64, n)
			errs := make([]string, n)
			for i := range outcomes {
				outcomes[i] = []int32{1, 2, 4}[i%3] // succeeded, retry, snooze
				if outcomes[i] == 2 {
					errs[i] = "boom"
				}
			}
			lo, hi := historyToday(ctx, t, conn)
			return []any{ids, tokens, outcomes, delays, errs, "ax", lo, hi}
		}},
		{"finishWait", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids, tokens := leases(ctx, t, conn, n)
			outcomes := make([]int32, n)
			for i := range outcomes {
				outcomes[i] = []int32{1, 2, 4}[i%3] // succeeded, retry, snooze
			}
			return []any{ids, tokens, outcomes, make([]int64, n), make([]string, n), "ax"}
		}},
		{"flowClaim", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			// One kind, a concurrency limit that does not bind, no
			// partitions, rates or breaker probe; $11 the clock.
			none32, none64 := []int32{0}, []int64{0}
			return []any{[]string{"due"}, []int32{int32(n)}, []int32{int32(10 * n)}, []bool{false}, none32, none32, none64,
				int32(n), "plans", int64(60e6), time.Now(), int64(0), none64, []*string{nil}, none32, []bool{false},
				[]string{}, []string{}, []int32{}, []*string{}}
		}},
		{"flowFinish", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids, tokens := leases(ctx, t, conn, n)
			outcomes := make([]int32, n)
			delays := make([]int64, n)
			errs := make([]string, n)
			for i := range outcomes {
				outcomes[i] = []int32{1, 2, 4}[i%3]
			}
			lo, hi := historyToday(ctx, t, conn)
			return []any{ids, tokens, outcomes, delays, errs, "ax", []string{"run"}, lo, hi}
		}},
		{"setKeys", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids := idsOf(ctx, t, conn, `SELECT id FROM ax.jobs WHERE state = 'scheduled' ORDER BY id LIMIT $1`, n)
			skeys, counted := make([]string, n), make([]bool, n)
			for i := range ids {
				skeys[i], counted[i] = fmt.Sprintf("seq-%d", i%7), true
			}
			return []any{ids, skeys, counted}
		}},
		{"extend", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids, tokens := leases(ctx, t, conn, n)
			return []any{ids, tokens, int64(60e6)}
		}},
		{"insertMany", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			ids := make([][16]byte, n)
			kinds := make([]string, n)
			payloads := make([][]byte, n)
			metas := make([][]byte, n)
			prios := make([]int16, n)
			runAts := make([]time.Time, n)
			maxes := make([]int32, n)
			keys := make([]string, n)
			for i := range ids {
				ids[i], kinds[i], payloads[i], metas[i] = uuid.New(), "new", []byte(`{}`), []byte(`{}`)
				prios[i], runAts[i], maxes[i], keys[i] = 2, time.Now(), 3, fmt.Sprintf("key-%d-%d", n, i)
			}
			// Default unique scopes: per kind, no period.
			global, finished := make([]bool, n), make([]bool, n)
			periods, windows := make([]int32, n), make([]int64, n)
			pkeys := make([]string, n)
			for i := range pkeys {
				pkeys[i] = fmt.Sprintf("tenant-%d", i%7)
			}
			return []any{ids, kinds, payloads, metas, prios, runAts, maxes, keys, global, finished, periods, windows, pkeys, make([]bool, n)}
		}},
		// The holders of n keys (Insert's lookup after a conflict): the
		// due jobs' keys, in their kind's scope.
		{"holders", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			spaces, periods, windows, keys := make([]string, n), make([]int32, n), make([]int64, n), make([]string, n)
			for i := range keys {
				spaces[i], keys[i] = "due", fmt.Sprintf("due-%d", i+1)
			}
			return []any{spaces, periods, windows, keys}
		}},
		// A finish's results and an insert's follow-ups, on n running
		// jobs (in the store, rows its transaction wrote just before).
		{"results", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids, _ := leases(ctx, t, conn, n)
			return []any{ids, jsonRows(n, `{"ok":true}`)}
		}},
		{"followUps", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids, _ := leases(ctx, t, conn, n)
			return []any{ids, jsonRows(n, `[]`)}
		}},
		// The operator's bulk changes, on n jobs they picked: due ones to
		// cancel and run now, finished ones to delete.
		{"bulkCancel", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			return []any{idsOf(ctx, t, conn, `SELECT id FROM ax.jobs WHERE state = 'scheduled' ORDER BY id LIMIT $1`, n)}
		}},
		{"bulkRunNow", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			return []any{idsOf(ctx, t, conn, `SELECT id FROM ax.jobs WHERE state = 'scheduled' ORDER BY id LIMIT $1`, n), "ax"}
		}},
		{"bulkDelete", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			return []any{idsOf(ctx, t, conn, `SELECT id FROM ax.jobs WHERE state = 'succeeded' ORDER BY id LIMIT $1`, n)}
		}},
		{"rescue", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{n, "ax"}
		}},
		{"prune", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{int64(time.Hour / time.Microsecond), n}
		}},
		{"archive", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{time.Unix(0, 0), n}
		}},
		{"move", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			return []any{idsOf(ctx, t, conn, `SELECT id FROM ax.jobs WHERE state = 'succeeded' ORDER BY id LIMIT $1`, n)}
		}},
		{"restore", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			return []any{idsOf(ctx, t, conn, `SELECT id FROM ax.jobs_history ORDER BY id LIMIT $1`, n)}
		}},
		{"pruneHistory", "", func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{time.Now().Add(-time.Hour), n}
		}},
		// A batch of n due jobs, made here (and kept: this case runs
		// last), cancelled. Its total counts one child more, so that the
		// cancel does not complete it (the completion job's template is
		// a stub).
		{"cancelBatch", "", func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			batch := uuid.New()
			for _, q := range []string{
				`INSERT INTO ax.batches (id, completion, template, total) VALUES ($1, gen_random_uuid(), '{}', $2 + 1)`,
				`UPDATE ax.jobs SET batch_id = $1 WHERE id = ANY (ARRAY(
					SELECT id FROM ax.jobs WHERE state = 'scheduled' AND batch_id IS NULL ORDER BY id LIMIT $2))`,
			} {
				if _, err := conn.Exec(ctx, q, [16]byte(batch), n); err != nil {
					t.Fatal(err)
				}
			}
			return []any{[16]byte(batch)}
		}},
	}
}

// jsonRows returns n copies of the JSON text v, as the json[] elements
// pgstore sends.
func jsonRows(n int, v string) [][]byte {
	rows := make([][]byte, n)
	for i := range rows {
		rows[i] = []byte(v)
	}
	return rows
}

// idsOf returns the n IDs query ($1 = n) reads.
func idsOf(ctx context.Context, t *testing.T, conn *pgx.Conn, query string, n int) [][16]byte {
	rows, _ := conn.Query(ctx, query, n)
	var ids [][16]byte
	var id [16]byte
	_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		ids = append(ids, id)
		return nil
	})
	if err != nil || len(ids) != n {
		t.Fatalf("ids: %d of %d: %v", len(ids), n, err)
	}
	return ids
}

// planStats is what the statistics of jobs say when the plans test runs
// its statements.
type planStats int

const (
	// staleStats: autoanalyze last sampled a large history and a short
	// queue. Jobs holds planRows finished jobs when it is analyzed; the
	// due and running jobs come after. The statistics say no job is live.
	staleStats planStats = iota
	// drainedStats: autoanalyze last sampled a drained queue (a burst's
	// jobs all finished and moved to the history, their dead rows not yet
	// vacuumed). Jobs holds no live row over many pages when it is
	// analyzed, so the planner takes it for empty however many pages it
	// has since (reltuples 0); every job comes after. An axbench run of
	// 1,000 workers right after one of 100 met this: a Finish whose
	// generic plan scanned all of jobs once per input row stalled every
	// outcome for 12 to 30 s.
	drainedStats
)

func (p planStats) String() string {
	return [...]string{"StaleStatistics", "DrainedStatistics"}[p]
}

// fillForPlans puts planRows jobs that succeeded a day ago in the table,
// and planRows that succeeded two days ago in the history (its day
// partitions of the last four days created as Archive names them), then
// planRows due jobs and planRows running jobs whose leases expired a
// minute ago, each with a unique key; jobs is analyzed as stats says, and
// not again. A plan that trusts such statistics, such as one that finds a
// job by id through a partial index it believes empty, or one that scans
// a table it believes empty once per input row, then shows its true cost.
func fillForPlans(ctx context.Context, t *testing.T, exec execFunc, stats planStats) {
	t.Helper()
	fillForPlansIn(ctx, t, exec, stats, planTables{schema: "ax", rows: planRows})
}

// execFunc runs one statement (a pool's or a connection's Exec).
type execFunc func(context.Context, string, ...any) (pgconn.CommandTag, error)

// planTables names the tables fillForPlansIn fills: schema's jobs and
// jobs_history, and on a distributed schema the value of shard every row
// gets (one shard's); rows is how many rows of each kind of job it puts
// there (planRows in fillForPlans).
type planTables struct {
	schema string
	shard  string // "" on PostgreSQL
	rows   int
}

// render fills in q's {s} (the schema), and {shard,} and {v,} (the
// shard column and its value, first in a column and a value list; empty
// on PostgreSQL).
func (p planTables) render(q string) string {
	col, val := "", ""
	if p.shard != "" {
		col, val = "shard, ", p.shard+", "
	}
	return strings.NewReplacer("{s}", p.schema, "{shard,}", col, "{v,}", val).Replace(q)
}

// fillForPlansIn is fillForPlans on the tables of in, in.rows of each
// kind of job.
func fillForPlansIn(ctx context.Context, t *testing.T, exec execFunc, stats planStats, in planTables) {
	t.Helper()
	done := `INSERT INTO {s}.jobs ({shard,}id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence,
		                      finished_at, unique_key)
		 SELECT {v,}gen_random_uuid(), 'done', '{}', 'succeeded', 2, now(), now(), 3, 1, 1,
		        now() - interval '1 day' - i * interval '1 millisecond', 'done-' || i
		 FROM generate_series(1, $1::int) i`
	analyze := []string{done, `VACUUM ANALYZE {s}.jobs`}
	if stats == drainedStats {
		// A burst of three times the table's jobs, gone: ANALYZE
		// without VACUUM keeps the pages and counts no live row in them.
		analyze = []string{
			strings.Replace(done, "generate_series(1, $1::int)", "generate_series(1, 3 * $1::int)", 1),
			`DELETE FROM {s}.jobs`,
			`ANALYZE {s}.jobs`,
			done,
		}
	}
	for _, q := range append(analyze,
		strings.ReplaceAll(historyPartitionsSQL, "ax.", "{s}."),
		`INSERT INTO {s}.jobs_history ({shard,}id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence,
		                      finished_at)
		 SELECT {v,}gen_random_uuid(), 'old', '{}', 'succeeded', 2, now(), now(), 3, 1, 1,
		        now() - interval '2 days' - i * interval '1 millisecond'
		 FROM generate_series(1, $1::int) i`,
		`INSERT INTO {s}.jobs ({shard,}id, kind, payload, priority, run_at, scheduled_at, max_attempts, unique_key)
		 SELECT {v,}gen_random_uuid(), 'due', '{}', 2, t, t, 3, 'due-' || i
		 FROM generate_series(1, $1::int) i, LATERAL (SELECT now() - i * interval '1 millisecond' AS t) r`,
		`INSERT INTO {s}.jobs ({shard,}id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence,
		                      lease_token, lease_expires_at, owner, attempted_at, unique_key)
		 SELECT {v,}gen_random_uuid(), 'run', '{}', 'running', 2, now(), now(), 3, 1, 1,
		        gen_random_uuid(), now() - interval '1 minute' - i * interval '1 millisecond', 'plans', now(), 'run-' || i
		 FROM generate_series(1, $1::int) i`,
	) {
		q = in.render(q)
		args := []any{in.rows}
		if !strings.Contains(q, "$1") {
			args = nil
		}
		if _, err := exec(ctx, q, args...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
}

// planOf finds the auto_explain notice of sql among notices and returns its
// top plan node.
func planOf(t *testing.T, notices []string, sql string) map[string]any {
	t.Helper()
	for _, n := range notices {
		i := strings.Index(n, "{")
		if i < 0 {
			continue
		}
		var doc struct {
			QueryText string         `json:"Query Text"`
			Plan      map[string]any `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(n[i:]), &doc); err != nil {
			t.Fatalf("auto_explain notice: %v\n%s", err, n)
		}
		if doc.QueryText == sql {
			return doc.Plan
		}
	}
	t.Fatalf("no auto_explain plan among %d notices", len(notices))
	return nil
}

// planWork is what a plan did: total is the sum over its nodes of the rows
// each produced and removed (by filters and join filters), times its loops;
// filtered is the most rows one node's filter and join filter removed,
// over all its loops.
type planWork struct {
	total, filtered int64
	// jobsRead is the most rows one scan of jobs read (returned, or
	// removed by its filter or recheck), over all its loops.
	jobsRead int64
}

func measure(node map[string]any) planWork {
	num := func(k string) int64 {
		f, _ := node[k].(float64)
		return int64(f)
	}
	loops := max(num("Actual Loops"), 1)
	f := (num("Rows Removed by Join Filter") + num("Rows Removed by Filter")) * loops
	w := planWork{
		total:    (num("Actual Rows")+num("Rows Removed by Index Recheck"))*loops + f,
		filtered: f,
	}
	if rel, _ := node["Relation Name"].(string); unsharded(rel) == "jobs" && node["Node Type"] != "ModifyTable" {
		w.jobsRead = w.total
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		m, _ := c.(map[string]any)
		cw := measure(m)
		w.total += cw.total
		w.filtered = max(w.filtered, cw.filtered)
		w.jobsRead = max(w.jobsRead, cw.jobsRead)
	}
	return w
}

// unsharded is the name of the table whose Citus shard is rel
// (jobs_102008: jobs), or rel.
func unsharded(rel string) string {
	if i := strings.LastIndexByte(rel, '_'); i > 0 && strings.Trim(rel[i+1:], "0123456789") == "" && i+1 < len(rel) {
		return rel[:i]
	}
	return rel
}

// indentPlan renders a plan as one line per node, for the test log.
func indentPlan(node map[string]any) string {
	var b strings.Builder
	var walk func(n map[string]any, depth int)
	walk = func(n map[string]any, depth int) {
		fmt.Fprintf(&b, "%s%v", strings.Repeat("  ", depth), n["Node Type"])
		for _, k := range []string{"Relation Name", "Index Name", "CTE Name", "Join Type", "Parent Relationship", "Subplan Name"} {
			if v, ok := n[k]; ok {
				fmt.Fprintf(&b, " %s=%v", k, v)
			}
		}
		for _, k := range []string{"Actual Rows", "Actual Loops", "Rows Removed by Filter", "Rows Removed by Join Filter"} {
			if v, ok := n[k]; ok {
				fmt.Fprintf(&b, " %s=%v", strings.TrimPrefix(k, "Actual "), v)
			}
		}
		b.WriteString("\n")
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			m, _ := c.(map[string]any)
			walk(m, depth+1)
		}
	}
	walk(node, 0)
	return b.String()
}

// TestClaimLocksOnlyWhatItTakes fills nine (kind, priority) ranges with due
// jobs and claims 10 inside an open transaction: another connection then
// finds exactly the 10 claimed rows locked, where a claim that locked each
// range's candidates before picking would hold up to 90. A second claim
// meanwhile skips the held rows and still takes 10 others, through its
// second round.
func TestClaimLocksOnlyWhatItTakes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := pgtest.Pool(t)
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
		SELECT gen_random_uuid(), k, '{}', p, t, t, 3
		FROM unnest('{a,b,c}'::text[]) k, generate_series(1, 3) p, generate_series(1, 100) i,
		     LATERAL (SELECT now() - i * interval '1 millisecond' AS t) r`)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []store.KindLimit{{Kind: "a", Limit: 10}, {Kind: "b", Limit: 10}, {Kind: "c", Limit: 10}}
	unlocked := func() int {
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM ax.jobs FOR UPDATE SKIP LOCKED) s`).Scan(&n); err != nil {
				return err
			}
			return errRollback
		})
		if err != errRollback {
			t.Fatal(err)
		}
		return n
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	rows, _ := tx.Query(ctx, s.ClaimSQL(), []string{"a", "b", "c"}, []int32{10, 10, 10}, int32(10), "holder", int64(60e6), int64(0), nil, int64(0))
	held := map[uuid.UUID]bool{}
	for rows.Next() {
		// Columns: now, clock, next, held, lost, then the job's, id first.
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if b, ok := v[5].([16]byte); ok {
			held[uuid.UUID(b)] = true
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(held) != 10 {
		t.Fatalf("claimed %d jobs, want 10", len(held))
	}
	if locked := 900 - unlocked(); locked != len(held) {
		t.Errorf("the claim holds %d row locks for the %d jobs it took", locked, len(held))
	}

	res, err := s.Claim(ctx, &store.ClaimParams{Owner: "other", Kinds: kinds, Limit: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 10 {
		t.Errorf("a claim beside the held one took %d jobs, want 10", len(res.Jobs))
	}
	for _, j := range res.Jobs {
		if held[j.ID] {
			t.Errorf("job %s claimed twice", j.ID)
		}
		if j.Priority != store.PriorityHigh {
			t.Errorf("job %s of priority %d taken while high-priority jobs are due", j.ID, j.Priority)
		}
	}
	if res.NextRunAt.IsZero() || res.NextRunAt.After(res.Now) {
		t.Errorf("NextRunAt %s with due jobs left (now %s)", res.NextRunAt, res.Now)
	}
}

// historyToday makes sure the history partition of the server's day
// exists and returns its bounds, the window in which the finish
// statements move the jobs they end into the history.
func historyToday(ctx context.Context, t *testing.T, conn *pgx.Conn) (lo, hi time.Time) {
	t.Helper()
	if err := conn.QueryRow(ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`).Scan(&lo); err != nil {
		t.Fatal(err)
	}
	hi = lo.Add(24 * time.Hour)
	_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS ax.jobs_history_p%s PARTITION OF ax.jobs_history
	FOR VALUES FROM ('%s') TO ('%s')`, lo.UTC().Format("20060102"), lo.UTC().Format(time.RFC3339), hi.UTC().Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	return lo, hi
}
