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

// routed renders one of today's statements for one shard of a distributed
// schema, mechanically: the equality shard = value joins the condition of
// every reference to jobs and jobs_history (but an INSERT's target), and
// the two volatile calls
// that Citus refuses in a distributed UPDATE go (gen_random_uuid() becomes
// a token derived from the row, clock_timestamp() becomes now()). It
// reports how many references it could not name the shard in: a
// statement it cannot render fully is not routed.
//
// It is the experiment behind the Citus dialect's design (docs/citus.md):
// the Citus store's statements can be today's, rendered with a placement
// predicate, instead of a second copy. The dialect itself would mark the
// places in the statements rather than find them with regular expressions.
func routed(sql, schema string, value int32) (string, int) {
	jobs := regexp.QuoteMeta(pgx.Identifier{schema, "jobs"}.Sanitize())
	hist := regexp.QuoteMeta(pgx.Identifier{schema, "jobs_history"}.Sanitize())
	v := fmt.Sprint(value)
	// An INSERT's target needs no condition: its rows carry their shard.
	refs := len(regexp.MustCompile(`(`+jobs+`|`+hist+`)`).FindAllStringIndex(sql, -1)) -
		len(regexp.MustCompile(`INSERT INTO (`+jobs+`|`+hist+`)`).FindAllStringIndex(sql, -1))
	named := 0
	for _, r := range []struct{ re, with string }{
		{`(FROM ` + jobs + ` (\w+)\s+WHERE )`, `${1}${2}.shard = ` + v + ` AND `},
		{`(FROM ` + jobs + `\s+WHERE )`, `${1}shard = ` + v + ` AND `},
		{`(FROM ` + hist + ` (\w+)\s+WHERE )`, `${1}${2}.shard = ` + v + ` AND `},
		// An UPDATE's own condition: the first WHERE at the start of a
		// line after its SET list.
		{`(UPDATE ` + jobs + ` (\w+) SET(?s:.*?)\n\s*WHERE )`, `${1}${2}.shard = ` + v + ` AND `},
	} {
		re := regexp.MustCompile(r.re)
		named += len(re.FindAllStringIndex(sql, -1))
		sql = re.ReplaceAllString(sql, r.with)
	}
	sql = strings.ReplaceAll(sql, "gen_random_uuid()", "md5(j.id::text || j.fence::text)::uuid")
	sql = strings.ReplaceAll(sql, "clock_timestamp()", "now()")
	return sql, refs - named
}

// TestCitusRouted plans today's hot statements rendered by routed for one
// shard, custom and generic plans as in TestCitusProbe, and checks the
// verdicts against the table (and docs/citus.md's): what naming the shard
// is enough for, and what needs more of the dialect.
func TestCitusRouted(t *testing.T) {
	t.Parallel()
	pool, schema := citusSchema(t)
	ctx := ctxT(t)
	st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	value := st.SlotValue(3)
	sqls := st.Store().BatchSQL()
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
	)
	for _, c := range []struct {
		name    string // a key of BatchSQL
		custom  string
		generic string
		why     string // what else the dialect needs
	}{
		{"claim", one, one, "nothing more: today's claim, with Go-made tokens"},
		{"extend", one, one, "nothing more"},
		{"finish", "not rendered: 1 references", "not rendered: 1 references", "its move's DELETE ... USING, and as finishWait: now() in CASEs and jsonb_build_object (STABLE) over columns: $now, run_at and error entries made in Go; no move at finish"},
		{"finishWait", immutable, generic, "as finish"},
		{"rescue", stable, generic, "as finish: $now, error entries made in Go"},
		{"archive", one, one, "nothing more"},
		{"move", one, generic, "a custom plan: the co-located INSERT ... SELECT then runs on the worker"},
		{"prune", one, one, "nothing more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sql, missed := routed(sqls[c.name], schema, value)
			row := fmt.Sprintf("| %s | %s | %s |", c.name, strings.TrimPrefix(c.custom, "refused: "), strings.TrimPrefix(c.generic, "refused: "))
			if !strings.Contains(string(doc), row) {
				t.Errorf("docs/citus.md lacks the row\n%s", row)
			}
			for _, m := range []struct{ mode, want string }{{"custom", c.custom}, {"generic", c.generic}} {
				if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_`+m.mode+`_plan`); err != nil {
					t.Fatal(err)
				}
				got := fmt.Sprintf("not rendered: %d references", missed)
				if missed == 0 {
					got = probe(t, ctx, conn, c.name, sql)
				}
				t.Logf("%s, %s plan: %s", c.name, m.mode, got)
				if got != m.want {
					t.Errorf("%s, %s plan: got %q, want %q (%s)", c.name, m.mode, got, m.want, c.why)
				}
			}
		})
	}
}

// TestCitusRoutedClaim runs today's Claim and ExtendLeases, through
// pgstore's Go code, with their statements rendered by routed for one
// shard: the claim takes the due jobs of that shard alone (3 of the 5),
// and their leases extend; the jobs of another shard stay scheduled.
func TestCitusRoutedClaim(t *testing.T) {
	t.Parallel()
	pool, schema := citusSchema(t)
	ctx := ctxT(t)
	st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mine, other := st.SlotValue(1), st.SlotValue(2)
	s := st.RenderedStore(func(sql string) string {
		r, missed := routed(sql, schema, mine)
		if missed != 0 {
			t.Fatalf("%d references to jobs without the shard:\n%s", missed, r)
		}
		return r
	}, "claim", "extend")
	defer s.Close()
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
