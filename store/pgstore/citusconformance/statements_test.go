package citusconformance_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/citustest"
)

// statementLog is a pgx tracer that records every statement its pool
// runs without an error (queries and the queries of batches), once per
// text and plan mode, with the arguments of its first such run: the
// statements the Citus store actually sends, whichever code path sent
// them. A statement that failed is left out: its arguments may be the bad
// input a conformance case sends to see it refused. A statement queued in
// a batch after one that forces generic plans (endsettings.go's
// genericPlan, which lasts the batch's transaction) is recorded as run on
// its generic plan.
type statementLog struct {
	mu    sync.Mutex
	args  map[loggedStatement][]any
	order []loggedStatement
}

// loggedStatement is a statement's text and whether it ran on its
// generic plan.
type loggedStatement struct {
	sql     string
	generic bool
}

func newStatementLog() *statementLog {
	return &statementLog{args: make(map[loggedStatement][]any)}
}

func (l *statementLog) add(st loggedStatement, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.args[st]; !ok {
		l.args[st] = copyArgs(args)
		l.order = append(l.order, st)
	}
}

// copyArgs copies a statement's arguments, and the bytes of those that
// are byte slices: a caller may reuse its buffers after the call (a
// conformance case changes a payload after its insert, to see that the
// store kept none of it).
func copyArgs(args []any) []any {
	out := slices.Clone(args)
	for i, a := range out {
		switch v := a.(type) {
		case []byte:
			out[i] = slices.Clone(v)
		case [][]byte:
			c := make([][]byte, len(v))
			for j := range v {
				c[j] = slices.Clone(v[j])
			}
			out[i] = c
		}
	}
	return out
}

// startedQuery carries a query's text and arguments from its start to
// its end; startedBatch, whether a batch forced generic plans so far.
type (
	startedQuery struct{}
	startedBatch struct{}
)

// forcesGeneric is how a statement that forces generic plans for the
// rest of its transaction reads (pgstore's genericPlan).
const forcesGeneric = `set_config('plan_cache_mode', 'force_generic_plan', true)`

// TraceQueryStart keeps the query for TraceQueryEnd.
func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, startedQuery{}, data)
}

// TraceQueryEnd records the query if it succeeded.
func (l *statementLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if q, ok := ctx.Value(startedQuery{}).(pgx.TraceQueryStartData); ok && data.Err == nil {
		l.add(loggedStatement{sql: q.SQL}, q.Args)
	}
}

// TraceBatchStart gives the batch its plan mode, custom until a query of
// it forces generic plans.
func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, startedBatch{}, new(bool))
}

// TraceBatchQuery records a query of a batch if it succeeded.
func (l *statementLog) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	generic, _ := ctx.Value(startedBatch{}).(*bool)
	if data.Err != nil || generic == nil {
		return
	}
	if strings.Contains(data.SQL, forcesGeneric) {
		*generic = true
		return
	}
	l.add(loggedStatement{sql: data.SQL, generic: *generic}, data.Args)
}

// TraceBatchEnd does nothing.
func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// statements returns the recorded statements in the order first seen.
func (l *statementLog) statements() []loggedStatement {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.order)
}

var (
	// utilityRE matches the statements EXPLAIN cannot plan: transaction
	// control, settings, notifications, and the DDL of maintenance (a
	// history partition's CREATE and ATTACH, which Citus propagates to
	// every shard by design).
	utilityRE = regexp.MustCompile(`(?is)^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|RESET|SHOW|LISTEN|UNLISTEN|DISCARD|DEALLOCATE|TRUNCATE|CREATE|ALTER|DROP|LOCK)\b`)
)

// routing returns what Citus does with st run with args: "one task" for
// a statement routed to one shard (or one that reads no distributed
// table), else what it does instead (citustest.Routing's Verdict: "tasks:
// 8", "subplans", "pulled to the coordinator"), or "utility" for a
// statement EXPLAIN cannot plan. EXPLAIN only, on the plan st ran on
// (generic, or custom for args): nothing runs.
func routing(ctx context.Context, conn *pgx.Conn, st loggedStatement, args []any) (string, error) {
	sql := st.sql
	if utilityRE.MatchString(sql) {
		return "utility", nil
	}
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryExecMode); ok {
			args = args[1:]
		}
	}
	// A transaction of its own, rolled back, with the plan cache set to
	// the plan the statement ran on: EXPLAIN of a write runs nothing, and
	// a custom plan is the one Citus routes by the arguments' values.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	mode := "force_custom_plan"
	if st.generic {
		mode = "force_generic_plan"
	}
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
		return "", err
	}
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+sql, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	if v := citustest.ReadRouting(strings.Join(lines, "\n")).Verdict(false); v != "" {
		return v, nil
	}
	return "one task", nil
}

// fansOut names the statements of the Citus store that read or write
// more than one shard by design, by a fragment of their text, with why.
// Every other statement the store runs must route to one shard.
var fansOut = []struct{ fragment, why string }{
	{`."jobs_all"`, "a read through jobs_all (Get, listings and their counts, dead-letter groups, finished jobs' stats): a job's shard cannot be told from its ID or from a listing's filters, so every shard's jobs and history are read, one task per shard (docs/citus.md)"},
	{"SELECT kind, state, count(*) FROM", "Stats: every shard's live jobs counted by kind and state"},
	{"SELECT DISTINCT shard FROM", "citusExpiredShardsSQL, citusArchiveShardsSQL: RescueExpired and Archive, which every host runs every second or so and which often find nothing, look over every shard in one statement for the shards with work, instead of a transaction per shard"},
	{"SELECT shard, false FROM", "citusFindSQL: the operator's Control (and a lookup by ID) finds a job's shard by reading every shard's jobs and history, since an ID names its shard only without a unique key"},
}

// checkStatementsRoute fails for every statement in log, but those in
// fansOut, that Citus would run as more than one shard task, through
// subplans, or by pulling rows to the coordinator; and, with everyFanOut
// (a run that calls every Store method: the conformance suite), for
// every entry of fansOut no statement matched (a stale entry).
func checkStatementsRoute(t *testing.T, log *statementLog, everyFanOut bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, citustest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	used := make([]bool, len(fansOut))
	stmts := log.statements()
	generic := 0
	for _, st := range stmts {
		sql := st.sql
		if st.generic {
			generic++
		}
		got, err := routing(ctx, conn, st, log.args[st])
		if err != nil {
			t.Errorf("EXPLAIN of a statement the store ran (generic plan: %v): %v\n%s", st.generic, err, sql)
			continue
		}
		if got == "one task" || got == "utility" {
			continue
		}
		allowed := false
		for i, f := range fansOut {
			if strings.Contains(sql, f.fragment) {
				used[i], allowed = true, true
			}
		}
		if !allowed {
			t.Errorf("the store ran a statement Citus runs as %s, not on one shard (generic plan: %v; add it to fansOut with why, if by design):\n%s", got, st.generic, sql)
		}
	}
	for i, f := range fansOut {
		if everyFanOut && !used[i] {
			t.Errorf("fansOut names %q (%s), which no statement of the run fans out with", f.fragment, f.why)
		}
	}
	t.Logf("%d distinct statements checked, %d of them on their generic plans", len(stmts), generic)
}
