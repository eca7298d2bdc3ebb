package pgstore_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store/pgstore"
)

// citusPlanSlot is the slot whose shard TestCitusPlansAreLinear fills.
const citusPlanSlot = 3

// citusPlanRows is how many rows of each kind of job the Citus plans test
// puts on its shard, and citusPlanBatches the batch sizes it plans. The
// worker plans each statement for its values, so it knows a batch's
// size: reading the whole shard for a batch of 1,000 of its 30,000 jobs
// is the cheaper plan, and a right one (seen: a sequential scan for 1,000
// IDs, probes for 100). At batches of 10 and 100, only a plan that
// misjudges the shard reads it.
const citusPlanRows = 10000

var citusPlanBatches = [2]int{10, 100}

// TestCitusPlansAreLinear is TestGenericPlansAreLinear for the statements
// the Citus store runs on one shard (CitusHotSQL): their plans on the
// shard's worker, on the shard's statistics, stale or those of a drained
// queue. Citus sends each statement to the worker with its parameters,
// and the worker plans it for their values on every run (an unnamed
// statement: a custom plan), so the coordinator's plan says nothing of
// the work. The test reads what Citus sends (citus.log_remote_commands),
// runs that text with the same values on the worker, as Citus does, and
// reads the worker's plan with auto_explain; the measures and their
// bounds are TestGenericPlansAreLinear's, at batches of 10 and 100
// (citusPlanBatches). The statements that reach one
// job by its primary key are listed in citusByKey, so that a statement
// added to CitusHotSQL without a case here fails.
func TestCitusPlansAreLinear(t *testing.T) {
	t.Parallel()
	planTest(t, "fills a shard and runs every per-shard statement under auto_explain on its worker")
	for _, stats := range []planStats{staleStats, drainedStats} {
		t.Run(stats.String(), func(t *testing.T) {
			t.Parallel()
			testCitusPlansAreLinear(t, stats)
		})
	}
}

// citusByKey names the statements of CitusHotSQL that read or write one
// job by its primary key, which no statistics make a scan: the plans test
// does not run them.
var citusByKey = map[string]bool{"controlLock": true, "restore": true, "unarchive": true, "heldInHistory": true}

// forcedGenericOnCitus names the statements the Citus store runs on
// their generic plans on the coordinator (pgstore's claims: endsettings.go).
var forcedGenericOnCitus = map[string]bool{"claim": true, "claimLost": true, "claimOneKind": true, "claimOpen": true}

// citusReadsAll names the statements of CitusHotSQL that may read more of
// the shard's jobs than a few rows per batch row, and why.
var citusReadsAll = map[string]string{
	"expired": readsAll["rescue"],
}

func testCitusPlansAreLinear(t *testing.T, stats planStats) {
	pool, schema, st := citusStore(t)
	ctx := ctxT(t)
	value := st.SlotValue(citusPlanSlot)
	fillForPlansIn(ctx, t, pool.Exec, stats, planTables{schema: schema, shard: fmt.Sprint(value), rows: citusPlanRows})

	coord := newCitusPlanner(ctx, t)
	sqls := st.CitusHotSQL(citusPlanSlot)
	cases := citusPlanCases(schema, st)
	for _, name := range slices.Sorted(maps.Keys(sqls)) {
		if _, ok := cases[name]; !ok && !citusByKey[name] {
			t.Errorf("CitusHotSQL's %q has no case in citusPlanCases and is not in citusByKey", name)
		}
	}
	checked := false
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		c := cases[name]
		t.Run(name, func(t *testing.T) {
			work := map[int]planWork{}
			small, large := citusPlanBatches[0], citusPlanBatches[1]
			for _, n := range citusPlanBatches {
				sql := sqls[name]
				if c.sql != nil {
					sql = c.sql(n)
				}
				args := c.args(ctx, t, coord.conn, n)
				text, node := coord.remoteCommand(ctx, t, sql, args, forcedGenericOnCitus[name])
				worker := coord.worker(t, node)
				if !checked {
					checked = true
					worker.checkStats(ctx, t, text, stats)
				}
				plan := worker.run(ctx, t, text, coord.paramOIDs(ctx, t, sql), args)
				work[n] = measure(plan)
				t.Logf("n=%d: work %d, most rows one node filtered out %d, most rows one scan of jobs read %d; worker plan:\n%s",
					n, work[n].total, work[n].filtered, work[n].jobsRead, indentPlan(plan))
				checkJobsRead(t, n, work[n], citusReadsAll[name] != "")
			}
			checkLinear(t, work, small, large)
		})
	}
}

// citusPlanCase is one statement of TestCitusPlansAreLinear: its
// arguments for a batch of n, and its text when it depends on n (nil:
// CitusHotSQL's).
type citusPlanCase struct {
	sql  func(n int) string
	args func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any
}

// citusPlanCases are TestCitusPlansAreLinear's statements, by their names
// in CitusHotSQL, over schema's jobs as fillForPlansIn filled them.
func citusPlanCases(schema string, st *pgstore.CitusStore) map[string]citusPlanCase {
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	ids := func(where string) func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) [][16]byte {
		return func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) [][16]byte {
			return idsOf(ctx, t, conn, `SELECT id FROM `+jobs+` WHERE `+where+` ORDER BY id LIMIT $1`, n)
		}
	}
	running, due, succeeded := ids(`state = 'running'`), ids(`state = 'scheduled'`), ids(`state = 'succeeded'`)
	idArgs := func(of func(context.Context, *testing.T, *pgx.Conn, int) [][16]byte) func(context.Context, *testing.T, *pgx.Conn, int) []any {
		return func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			return []any{of(ctx, t, conn, n)}
		}
	}
	claimArgs := func(n int) []any {
		return []any{[]string{"due"}, []int32{int32(n)}, int32(n), "plans", int64(60e6), int64(60e6), nil, int64(10e3)}
	}
	return map[string]citusPlanCase{
		"insert": {
			sql: func(n int) string { return st.CitusInsertSQL(citusPlanSlot, n) },
			args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
				var args []any
				for i := range n {
					args = append(args, [16]byte(uuid.New()), "new", []byte(`{}`), []byte(`{}`), int16(2), time.Now(), int32(3),
						fmt.Sprintf("new-%d-%d", n, i), false, false, int32(0), int64(0), "")
				}
				return args
			},
		},
		// The holders of n keys (an insert's lookup after a conflict):
		// the due jobs' keys, in their kind's scope.
		"holders": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			spaces, periods, windows, keys := make([]string, n), make([]int32, n), make([]int64, n), make([]string, n)
			for i := range keys {
				spaces[i], keys[i] = "due", fmt.Sprintf("due-%d", i+1)
			}
			return []any{spaces, periods, windows, keys}
		}},
		"takenIDs": {args: idArgs(due)},
		"peek": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{[]string{"due"}, []int32{int32(n)}, int64(10e3)}
		}},
		"claim": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any { return claimArgs(n) }},
		// The claim of the candidates a Claim chose on the shard.
		"claimIDs": {args: func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			return []any{due(ctx, t, conn, n), int64(10e3), "plans", int64(60e6)}
		}},
		"claimOneKind": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{"due", int32(n), nil, "plans", int64(60e6), int64(10e3), int64(0)}
		}},
		"claimOpen": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return append(claimArgs(n), int64(0))
		}},
		"claimLost": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return append(claimArgs(n), time.Now(), int32(n))
		}},
		"extend": {args: func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			ids, tokens := leasesOf(ctx, t, conn, jobs, n)
			return []any{ids, tokens, int64(60e6)}
		}},
		"lock": {args: idArgs(running)},
		// Each running job written as succeeded, as a finish does.
		"write": {args: func(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) []any {
			now := time.Now()
			states, times, ints, entries, flags, none := make([]string, n), make([]time.Time, n), make([]int32, n),
				make([][]byte, n), make([]bool, n), make([]*time.Time, n)
			for i := range n {
				states[i], times[i], ints[i], entries[i] = "succeeded", now, 1, []byte(`[]`)
			}
			return []any{running(ctx, t, conn, n), states, times, ints, ints, entries, ints, none, flags, none, flags, flags, times}
		}},
		"expired": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{time.Now(), n}
		}},
		"archive": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any { return []any{n} }},
		"move":    {args: idArgs(succeeded)},
		"moved":   {args: idArgs(succeeded)},
		"prune": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{int64(time.Hour / time.Microsecond), n}
		}},
		"pruneHistory": {args: func(_ context.Context, _ *testing.T, _ *pgx.Conn, n int) []any {
			return []any{time.Now().Add(-time.Hour), n}
		}},
	}
}

// citusPlanner is a connection to the coordinator that logs the commands
// Citus sends the workers, and the connections to the workers that run
// them again, by address.
type citusPlanner struct {
	conn    *pgx.Conn
	notices *noticeLog
	workers map[string]*planWorker
}

func newCitusPlanner(ctx context.Context, t *testing.T) *citusPlanner {
	conn, log := connectLogged(ctx, t, citustest.URL())
	if _, err := conn.Exec(ctx, `SET citus.log_remote_commands = on`); err != nil {
		t.Fatal(err)
	}
	p := &citusPlanner{conn: conn, notices: log, workers: map[string]*planWorker{}}
	for _, u := range citustest.WorkerURLs(t) {
		w := &planWorker{}
		w.conn, w.notices = connectLogged(ctx, t, u)
		for _, q := range append(autoExplainSQL[:len(autoExplainSQL):len(autoExplainSQL)],
			// The shards' own catalog rows, which Citus hides from
			// other clients' reads of pg_class (checkStats).
			`SET citus.show_shards_for_app_name_prefixes = '*'`,
		) {
			if _, err := w.conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		cfg := w.conn.Config()
		p.workers[fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)] = w
	}
	return p
}

// remoteServer reads the worker a logged command went to from its
// notice's detail ("on server postgres@127.0.0.1:5442 connectionId: 2").
var remoteServer = regexp.MustCompile(`on server [^@ ]*@(\S+) connectionId`)

// remoteCommand runs sql with args on the coordinator, in a transaction
// rolled back (on its generic plan when generic, as the store runs its
// claims), and returns the one statement Citus sent a worker for it and
// that worker's address. Any other number of statements fails the test:
// CitusHotSQL's statements each run on one shard.
func (p *citusPlanner) remoteCommand(ctx context.Context, t *testing.T, sql string, args []any, generic bool) (text, node string) {
	t.Helper()
	mode := "auto"
	if generic {
		mode = "force_generic_plan"
	}
	p.notices.take()
	if err := runRolledBack(ctx, p.conn, `SET LOCAL plan_cache_mode = `+mode, sql, args...); err != nil {
		t.Fatalf("on the coordinator: %v", err)
	}
	var sent []string
	for _, n := range p.notices.take() {
		cmd, ok := strings.CutPrefix(n.Message, "issuing ")
		if !ok || isCitusTxCommand(cmd) {
			continue
		}
		m := remoteServer.FindStringSubmatch(n.Detail)
		if m == nil {
			t.Fatalf("no server in the detail %q of %q", n.Detail, n.Message)
		}
		text, node = cmd, m[1]
		sent = append(sent, cmd)
	}
	if len(sent) != 1 {
		t.Fatalf("Citus sent %d statements for one, want 1:\n%s", len(sent), strings.Join(sent, "\n"))
	}
	return text, node
}

// isCitusTxCommand reports whether cmd is one of the commands Citus wraps
// a worker's part of a transaction in.
func isCitusTxCommand(cmd string) bool {
	for _, p := range []string{"BEGIN", "ROLLBACK", "COMMIT", "PREPARE TRANSACTION", "SELECT assign_distributed_transaction_id"} {
		if strings.HasPrefix(cmd, p) {
			return true
		}
	}
	return false
}

// paramOIDs returns the types of sql's parameters, as the coordinator
// infers them: the types Citus sends the worker with their values.
func (p *citusPlanner) paramOIDs(ctx context.Context, t *testing.T, sql string) []uint32 {
	t.Helper()
	sd, err := p.conn.Prepare(ctx, "", sql)
	if err != nil {
		t.Fatal(err)
	}
	return sd.ParamOIDs
}

// worker returns the connection to the worker at node.
func (p *citusPlanner) worker(t *testing.T, node string) *planWorker {
	t.Helper()
	w := p.workers[node]
	if w == nil {
		t.Fatalf("Citus sent a statement to %s, not a worker of pg_dist_node (%v)", node, slices.Sorted(maps.Keys(p.workers)))
	}
	return w
}

// planWorker is a connection to one worker that runs statements as
// Citus sends them, under auto_explain.
type planWorker struct {
	conn    *pgx.Conn
	notices *noticeLog
}

// run runs text with args (of types oids) on the worker, in a transaction
// rolled back, as one unnamed statement with typed parameters, as Citus
// does, and returns its plan's top node.
func (w *planWorker) run(ctx context.Context, t *testing.T, text string, oids []uint32, args []any) map[string]any {
	t.Helper()
	tm := w.conn.TypeMap()
	values := make([][]byte, len(args))
	formats := make([]int16, len(args))
	for i, a := range args {
		formats[i] = tm.FormatCodeForOID(oids[i])
		v, err := tm.Encode(oids[i], formats[i], a, nil)
		if err != nil {
			t.Fatalf("encode $%d (%T): %v", i+1, a, err)
		}
		values[i] = v
	}
	if _, err := w.conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	w.notices.take()
	res := w.conn.PgConn().ExecParams(ctx, text, values, oids, formats, nil).Read()
	if _, err := w.conn.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if res.Err != nil {
		t.Fatalf("on the worker: %v\n%s", res.Err, text)
	}
	return planOf(t, w.notices.messages(), text)
}

// shardOf reads the name of the first shard of jobs that text names.
var shardOf = regexp.MustCompile(`\.(jobs_[0-9]+)\b`)

// checkStats requires that the worker's statistics of the shard of jobs
// that text reaches are those stats says: a drained queue's (no live row
// over the pages) or stale ones (the planRows finished jobs only).
func (w *planWorker) checkStats(ctx context.Context, t *testing.T, text string, stats planStats) {
	t.Helper()
	m := shardOf.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no shard of jobs in %s", text)
	}
	var tuples float64
	var pages int32
	if err := w.conn.QueryRow(ctx, `SELECT reltuples, relpages FROM pg_class WHERE relname = $1`, m[1]).Scan(&tuples, &pages); err != nil {
		t.Fatalf("the statistics of shard %s: %v", m[1], err)
	}
	t.Logf("shard %s: reltuples %.0f, relpages %d", m[1], tuples, pages)
	switch {
	case stats == drainedStats && (tuples != 0 || pages == 0):
		t.Fatalf("shard %s: reltuples %.0f over %d pages, want 0 over some: not a drained queue's statistics", m[1], tuples, pages)
	case stats == staleStats && tuples != citusPlanRows:
		t.Fatalf("shard %s: reltuples %.0f, want %d: not the stale statistics", m[1], tuples, citusPlanRows)
	}
}
