package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/axsched/ax/internal/citustest"
)

// TestCitusProbe plans today's pgstore hot statements, unchanged, against
// a schema MigrateCitus distributed, and checks what Citus does with each:
// the table below is the record of the dialect work the Citus store needs
// (docs/citus.md cites it).
//
// Each statement is planned twice: with a custom plan for one set of
// values (none NULL, so that no condition folds to false), and on its
// generic plan, as pgstore forces on its hot path (endsettings.go,
// TestHotPathRunsOnGenericPlans). Verdicts: "refused: <Citus's reason>",
// "tasks: N" for a plan Citus runs as N shard tasks (the hot path wants
// 1), and "subplans" for one Citus splits into steps that pass rows
// through the coordinator (recursive planning). EXPLAIN only: nothing
// runs. When Citus's answer changes, the test fails: update the table
// and docs/citus.md.
//
// Two findings beyond analysis.md's: every multi-shard statement is
// refused on its generic plan ("parameters in SQL functions"), so the
// Citus store must not force generic plans on statements that are not
// router ones; and the shard column in the unique index breaks every
// ON CONFLICT of today's inserts before Citus's planner is reached.
func TestCitusProbe(t *testing.T) {
	t.Parallel()
	_, _, st := citusStore(t)
	ctx := ctxT(t)
	sqls := st.Store().BatchSQL()
	sqls["insertOne"] = st.Store().InsertOneSQL()
	sqls["holders"] = st.Store().HoldersSQL()
	sqls["get"] = st.Store().GetSQL()
	doc, err := os.ReadFile("../../docs/citus.md")
	if err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, citustest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	// Citus's reasons, as it words them.
	const (
		forUpdate  = "refused: could not run distributed query with FOR UPDATE/SHARE commands"
		pushDown   = "refused: cannot push down this subquery: For Update/Share commands are currently unsupported"
		coLocated  = "refused: complex joins are only supported when all distributed tables are co-located and joined on their distribution columns"
		onConflict = "refused: there is no unique or exclusion constraint matching the ON CONFLICT specification"
		generic    = "refused: could not create distributed plan: Possibly this is caused by the use of parameters in SQL functions, which is not supported in Citus."
		offset     = "refused: cannot push down this subquery: Offset clause is currently unsupported when a lateral subquery references a column from a table function (u)"
		everyShard = "tasks: 8"
	)
	for _, c := range []struct {
		name    string // a key of BatchSQL, or insertOne, holders, get
		custom  string // the verdict on the plan for one set of values
		generic string // on the generic plan, which pgstore forces on its hot path
		why     string // what the Citus store does instead
	}{
		{"insertOne", onConflict, onConflict, "the unique index now leads with shard (Citus wants it in every unique index): ON CONFLICT names it; and the INSERT in a CTE is not router: a router INSERT ... ON CONFLICT DO NOTHING, then the holder lookup, on the key's shard"},
		{"insertMany", onConflict, onConflict, "as insertOne; INSERT ... SELECT FROM unnest goes through the coordinator: a multi-row INSERT per shard"},
		{"holders", offset, generic, "a unique key's holders are on the key's shard: shard = $s makes it one task (a router query, which takes the lateral probe)"},
		{"claim", coLocated, generic, "its CTEs join jobs to itself by id, not by shard, and SKIP LOCKED needs one shard: shard = $s in every reference to jobs, one slot per statement, no gen_random_uuid()"},
		{"finish", pushDown, generic, "the row lock of the token check and the move's INSERT CTE: a router UPDATE per shard with $now, no move at finish"},
		{"finishWait", pushDown, generic, "as finish"},
		{"extend", pushDown, generic, "the lease token carries the shard: one router UPDATE per shard"},
		{"rescue", forUpdate, generic, "per owned slot, shard = $s, with $now"},
		{"archive", forUpdate, generic, "per slot, shard = $s"},
		{"move", generic, generic, "a co-located INSERT ... SELECT per shard (pushed down to the worker) and DELETE, shard = $s"},
		{"prune", forUpdate, generic, "per slot, shard = $s"},
		// Not a hot statement: a read through jobs_all. Citus pushes the
		// view's UNION ALL down whole, one task per shard and no subplan
		// (shard is at the same position in both tables), so a job
		// moving to the history within its shard is seen once.
		{"get", everyShard, generic, "nothing on a custom plan; locate the shard (from a lease token) where one is known"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sql, ok := sqls[c.name]
			if !ok {
				t.Fatalf("no statement %s", c.name)
			}
			checkProbe(t, ctx, conn, doc, c.name, sql, c.custom, c.generic, c.why)
		})
	}
}

// probe returns Citus's verdict on sql (see TestCitusProbe).
func probe(t *testing.T, ctx context.Context, conn *pgx.Conn, name, sql string) string {
	t.Helper()
	stmt := "probe_" + strings.ToLower(name)
	if _, err := conn.Exec(ctx, "PREPARE "+stmt+" AS "+sql); err != nil {
		return "refused at parse: " + firstLine(err)
	}
	defer conn.Exec(context.Background(), "DEALLOCATE "+stmt) //nolint:errcheck
	var types []string
	if err := conn.QueryRow(ctx, `SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1`, stmt).Scan(&types); err != nil {
		t.Fatal(err)
	}
	args := make([]string, len(types))
	for i, typ := range types {
		args[i] = probeValue(typ)
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+stmt+"("+strings.Join(args, ", ")+")", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return "refused: " + firstLine(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "refused: " + firstLine(err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("%s plan:\n%s", name, plan)
	if v := citustest.ReadRouting(plan).Verdict(true); v != "" {
		return v
	}
	return "coordinator only"
}

// probeValues are the parameter values of the probe's custom plans, by
// type: a value, not NULL, so that the planner cannot fold a condition to
// false and leave Citus nothing to route; arrays of one element.
var probeValues = map[string]string{
	"uuid":                     "00000000-0000-7000-8000-000000000001",
	"text":                     "k",
	"smallint":                 "1",
	"integer":                  "1",
	"bigint":                   "1000000",
	"boolean":                  "false",
	"timestamp with time zone": "2026-12-01 00:00:00+00",
	"jsonb":                    "{}",
	"bytea":                    "\\x00",
	"interval":                 "1 minute",
}

// probeValue returns an SQL literal of type typ for the probe's custom
// plans, or NULL for a type probeValues lacks.
func probeValue(typ string) string {
	elem, array := strings.CutSuffix(typ, "[]")
	v, ok := probeValues[elem]
	if !ok {
		return "NULL"
	}
	if array {
		v = `{"` + strings.ReplaceAll(v, `"`, `\"`) + `"}`
	}
	return "'" + strings.ReplaceAll(v, "'", "''") + "'::" + typ
}

// firstLine is err's message, or its PostgreSQL message alone.
func firstLine(err error) string {
	if pgErr, ok := err.(*pgconn.PgError); ok {
		if pgErr.Detail != "" {
			return pgErr.Message + ": " + pgErr.Detail
		}
		return pgErr.Message
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// checkProbe requires that docs/citus.md (doc) has the probe's row for
// statement name, and that Citus does with sql what custom and generic
// say on a custom and on a generic plan (why, when it does not).
func checkProbe(t *testing.T, ctx context.Context, conn *pgx.Conn, doc []byte, name, sql, custom, generic, why string) {
	t.Helper()
	row := fmt.Sprintf("| %s | %s | %s |", name, strings.TrimPrefix(custom, "refused: "), strings.TrimPrefix(generic, "refused: "))
	if !strings.Contains(string(doc), row) {
		t.Errorf("docs/citus.md lacks the row\n%s", row)
	}
	for _, m := range []struct{ mode, want string }{{"custom", custom}, {"generic", generic}} {
		if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_`+m.mode+`_plan`); err != nil {
			t.Fatal(err)
		}
		got := probe(t, ctx, conn, name, sql)
		t.Logf("%s, %s plan: %s", name, m.mode, got)
		if got != m.want {
			t.Errorf("%s, %s plan: got %q, want %q (%s)", name, m.mode, got, m.want, why)
		}
	}
}
