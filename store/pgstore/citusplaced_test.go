package pgstore_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// unplaced returns the references to jobs and jobs_history in sql (but an
// INSERT's target, whose rows carry their shard) whose condition does not
// start with shard = value (or shard = value::numeric: {routed},
// placement.go): where a statement rendered for one shard would still
// read or lock every shard.
func unplaced(sql, schema string, value int32) []string {
	jobs := regexp.QuoteMeta(pgx.Identifier{schema, "jobs"}.Sanitize())
	hist := regexp.QuoteMeta(pgx.Identifier{schema, "jobs_history"}.Sanitize())
	ref := regexp.MustCompile(`(INSERT INTO )?(` + jobs + `|` + hist + `)( AS)?( \w+)?`)
	var bad []string
	for _, m := range ref.FindAllStringSubmatchIndex(sql, -1) {
		if m[2] >= 0 { // INSERT INTO
			continue
		}
		alias := ""
		if m[8] >= 0 {
			switch a := strings.TrimSpace(sql[m[8]:m[9]]); a {
			case "WHERE", "SET", "USING", "SELECT", "RETURNING":
				// not an alias: the reference has none
			default:
				alias = a + "."
			}
		}
		rest := sql[m[5]:] // after the table's name
		where := strings.Index(rest, "WHERE ")
		cond := ""
		if where >= 0 {
			cond = rest[where+len("WHERE "):]
		}
		if !strings.HasPrefix(cond, fmt.Sprintf("%sshard = %d AND ", alias, value)) &&
			!strings.HasPrefix(cond, fmt.Sprintf("%sshard = %d::numeric AND ", alias, value)) { // {routed}
			end := min(len(sql), m[1]+80)
			bad = append(bad, sql[m[0]:end])
		}
	}
	return bad
}

// routed renders a statement not yet placed (placement.go) as a placed one
// would be, mechanically, to see what naming the shard does for it: the
// equality joins the condition of every reference to jobs and
// jobs_history, and gen_random_uuid() becomes a token derived from the
// row.
func routed(sql, schema string, value int32) string {
	jobs := regexp.QuoteMeta(pgx.Identifier{schema, "jobs"}.Sanitize())
	hist := regexp.QuoteMeta(pgx.Identifier{schema, "jobs_history"}.Sanitize())
	v := fmt.Sprint(value)
	for _, r := range []struct{ re, with string }{
		{`(FROM ` + jobs + ` (\w+)\s+WHERE )`, `${1}${2}.shard = ` + v + ` AND `},
		{`(FROM ` + jobs + `\s+WHERE )`, `${1}shard = ` + v + ` AND `},
		{`(FROM ` + hist + ` (\w+)\s+WHERE )`, `${1}${2}.shard = ` + v + ` AND `},
		// An UPDATE's own condition: the first WHERE at the start of a
		// line after its SET list.
		{`(UPDATE ` + jobs + ` (\w+) SET(?s:.*?)\n\s*WHERE )`, `${1}${2}.shard = ` + v + ` AND `},
	} {
		sql = regexp.MustCompile(r.re).ReplaceAllString(sql, r.with)
	}
	// An insert names the shard as a column, and the unique index (which
	// leads with it) in ON CONFLICT.
	sql = strings.NewReplacer(
		"AS j (id, kind,", "AS j (shard, id, kind,",
		"SELECT $1, $2,", "SELECT "+v+", $1, $2,",
		"SELECT id, kind, payload,", "SELECT "+v+", id, kind, payload,",
		"ON CONFLICT ((CASE", "ON CONFLICT (shard, (CASE",
	).Replace(sql)
	return strings.ReplaceAll(sql, "gen_random_uuid()", "md5(j.id::text || j.fence::text)::uuid")
}

// TestCitusPlacedStatements plans the statements of a Store placed on one
// slot (NewCitus's), custom and generic plans as in TestCitusProbe, and
// checks them against the table (and docs/citus.md's). The placed ones
// must name the shard in every reference to jobs and run as one task; the
// others, not placed yet, are rendered by routed, to record what naming
// the shard is not enough for.
func TestCitusPlacedStatements(t *testing.T) {
	t.Parallel()
	_, schema, st := citusStore(t)
	ctx := ctxT(t)
	const slot = 3
	value := st.SlotValue(slot)
	sqls := st.SlotStore(slot).BatchSQL()
	sqls["insertOne"] = st.SlotStore(slot).InsertOneSQL()
	doc, err := os.ReadFile("../../docs/citus.md")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, citustest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const (
		one       = "tasks: 1"
		generic   = "refused: could not create distributed plan: Possibly this is caused by the use of parameters in SQL functions, which is not supported in Citus."
		stable    = "refused: STABLE functions used in UPDATE queries cannot be called with column references"
		immutable = "refused: non-IMMUTABLE functions are not allowed in CASE or COALESCE statements"
		// Citus runs the INSERT CTE as a subplan even under EXPLAIN,
		// through a connection of its own, where it fails.
		aborted = "refused: current transaction is aborted, commands ignored until end of transaction block"
		pulled  = "pulled to the coordinator"
	)
	for _, c := range []struct {
		name    string // a key of BatchSQL, or insertOne
		placed  bool   // rendered by placement.go (else by routed)
		custom  string
		generic string
		why     string // what else the dialect needs
	}{
		{"claim", true, one, one, "nothing more"},
		{"extend", true, one, one, "nothing more"},
		{"archive", true, one, one, "nothing more"},
		{"move", true, pulled + ", " + one, generic, "the DELETE CTE runs on the shard, but its rows come back through the coordinator for the INSERT: INSERT INTO jobs_history SELECT ... FROM jobs WHERE shard = v (co-located: pushed down), then the DELETE, in one transaction on the shard"},
		{"prune", true, one, one, "nothing more"},
		{"finishWait", false, immutable, generic, "now() in CASEs and jsonb_build_object (STABLE) over columns: $now, run_at and error entries made in Go"},
		{"rescue", false, stable, generic, "as finishWait"},
		{"insertOne", false, aborted, generic, "its INSERT in a CTE is planned apart, through the coordinator: two router statements on the job's shard, INSERT ... ON CONFLICT DO NOTHING, then the holder lookup"},
		{"insertMany", false, pulled, generic, "INSERT ... SELECT FROM unnest passes the rows through the coordinator: a multi-row INSERT ... VALUES per shard"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sql := sqls[c.name]
			if !c.placed {
				sql = routed(sql, schema, value)
			}
			// The checker bites: today's statement, not placed, fails it.
			if c.placed && len(unplaced(st.Store().BatchSQL()[c.name], schema, value)) == 0 {
				t.Fatalf("unplaced finds nothing wrong with the statement of the whole schema:\n%s", st.Store().BatchSQL()[c.name])
			}
			if bad := unplaced(sql, schema, value); len(bad) > 0 {
				t.Fatalf("references to jobs that do not name shard %d:\n%s", value, strings.Join(bad, "\n"))
			}
			checkProbe(t, ctx, conn, doc, c.name, sql, c.custom, c.generic, c.why)
		})
	}
}

// TestCitusPlacedClaim runs today's Claim and ExtendLeases, through
// pgstore's Go code, on the Store NewCitus placed on one slot: the claim
// takes the due jobs of that slot's shard alone (3 of the 5), their
// tokens carry the slot, and their leases extend; the jobs of another
// shard stay scheduled.
func TestCitusPlacedClaim(t *testing.T) {
	t.Parallel()
	pool, schema, st := citusStore(t)
	ctx := ctxT(t)
	const slot = 1
	mine, other := st.SlotValue(slot), st.SlotValue(slot+1)
	s := st.SlotStore(slot)
	for _, v := range []int32{mine, mine, mine, other, other} {
		insertAt(t, pool, schema, v)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "k", Limit: 10}}, Limit: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 3 {
		t.Fatalf("claimed %d jobs, want the 3 of shard %d", len(res.Jobs), mine)
	}
	leases := make([]store.Lease, len(res.Jobs))
	for i, j := range res.Jobs {
		leases[i] = store.Lease{ID: j.ID, Token: j.LeaseToken}
		if got := pgstore.TokenSlot(j.LeaseToken); got != slot {
			t.Errorf("token %s carries slot %d, want %d", j.LeaseToken, got, slot)
		}
	}
	ext, err := s.ExtendLeases(ctx, &store.ExtendParams{Leases: leases, Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Lost) != 0 {
		t.Fatalf("%d leases lost, want none: %+v", len(ext.Lost), ext)
	}
	var running, extended, scheduled int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running' AND shard = $1),
		count(*) FILTER (WHERE lease_expires_at > now() + interval '30 minutes'),
		count(*) FILTER (WHERE state = 'scheduled' AND shard = $2) FROM `+schema+`.jobs`, mine, other).Scan(&running, &extended, &scheduled)
	if err != nil {
		t.Fatal(err)
	}
	if running != 3 || extended != 3 || scheduled != 2 {
		t.Fatalf("%d running (%d extended) in shard %d and %d scheduled in shard %d, want 3 (3) and 2", running, extended, mine, scheduled, other)
	}
}

// insertAt inserts a due job of kind k with shard value.
func insertAt(t *testing.T, pool *pgxpool.Pool, schema string, value int32) {
	t.Helper()
	_, err := pool.Exec(ctxT(t), `INSERT INTO `+schema+`.jobs (shard, id, kind, payload, priority, run_at, scheduled_at, max_attempts)
		VALUES ($1, gen_random_uuid(), 'k', '{}', 2, now() - interval '1 second', now(), 3)`, value)
	if err != nil {
		t.Fatal(err)
	}
}
