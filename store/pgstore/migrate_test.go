package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// schemaDump describes every table, column, index and constraint of the
// non-system schemas, in a stable order.
// historyPartition matches the name of a day's history partition.
var historyPartition = regexp.MustCompile(`jobs_history_p[0-9]{8}`)

func schemaDump(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := ctxT(t)
	var b strings.Builder
	for _, q := range []string{
		`SELECT table_schema || '.' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
		 FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
		 ORDER BY table_schema, table_name, ordinal_position`,
		`SELECT schemaname || ' ' || indexdef FROM pg_indexes
		 WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY schemaname, indexname`,
		`SELECT n.nspname || ' ' || coalesce(r.relname || ' ', '') || conname || ' ' || pg_get_constraintdef(c.oid) FROM pg_constraint c
		 JOIN pg_namespace n ON n.oid = c.connamespace LEFT JOIN pg_class r ON r.oid = c.conrelid
		 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
		 ORDER BY 1`,
		`SELECT n.nspname || '.' || c.relname || ' ' || array_to_string(c.reloptions, ',') FROM pg_class c
		 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.reloptions IS NOT NULL
		 AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1`,
		`SELECT string_agg(version || ' ' || name, ', ' ORDER BY version) FROM ax.schema_version`,
	} {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line *string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			// History partitions are made by use (a Finish makes its
			// day's), not by migrations: they are data here.
			if line != nil && !historyPartition.MatchString(*line) {
				b.WriteString(*line + "\n")
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	// The reference: the migrated template.
	want := schemaDump(t, pgtest.Pool(t))
	for _, idx := range []string{"jobs_claim_idx", "jobs_unique_scope_idx", "jobs_busy_idx", "jobs_finished_idx",
		"autovacuum_vacuum_scale_factor", "ax.leader", "ax.nodes", "ax.periodic"} {
		if !strings.Contains(want, idx) {
			t.Fatalf("schema lacks %s:\n%s", idx, want)
		}
	}
	cases := []struct {
		name  string
		runs  int // sequential rounds
		procs int // concurrent Migrate calls per round
	}{
		{"Twice", 2, 1},
		{"Concurrently", 1, 4},
		{"ConcurrentlyTwice", 2, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a database of its own
			pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
			for range c.runs {
				var wg sync.WaitGroup
				errs := make([]error, c.procs)
				for i := range c.procs {
					wg.Go(func() { errs[i] = pgstore.Migrate(context.Background(), pool) })
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
			}
			if got := schemaDump(t, pool); got != want {
				t.Fatalf("schema differs from the template's:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestMigrateNewerSchema: code finds the schema migrated by a newer
// release. It runs when every migration it does not know says so
// ("-- ax:compatible-from N" with N at most this code's version: the
// additive migrations of later v1 releases), and then schedules, runs and
// finishes jobs on it (the future migrations add columns to jobs and
// jobs_history, as an additive release would); otherwise Migrate, New and
// New WithoutMigrate refuse it with ErrSchemaTooNew and change nothing.
func TestMigrateNewerSchema(t *testing.T) {
	t.Parallel()
	latest := pgstore.SchemaVersion()
	type future struct {
		compatibleFrom any // nil: a breaking migration
	}
	tests := []struct {
		name   string
		future []future
		refuse bool
	}{
		{"breaking", []future{{nil}}, true},
		{"additive from this version", []future{{latest}}, false},
		{"additive from an older version", []future{{latest - 3}}, false},
		{"additive then breaking", []future{{latest}, {latest + 2}}, true},
		{"additive needing the first future version", []future{{latest}, {latest + 1}}, true},
		{"two additive", []future{{latest}, {latest - 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := ctxT(t)
			for i, f := range tt.future {
				v := latest + 1 + i
				col := fmt.Sprintf("future_%d", v)
				if _, err := pool.Exec(ctx, `ALTER TABLE ax.jobs ADD COLUMN `+col+` text;
ALTER TABLE ax.jobs_history ADD COLUMN `+col+` text`); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `INSERT INTO ax.schema_version (version, name, compatible_from) VALUES ($1, $2, $3)`,
					v, fmt.Sprintf("%04d_future.sql", v), f.compatibleFrom); err != nil {
					t.Fatal(err)
				}
			}
			before := schemaDump(t, pool)
			check := func(what string, err error) {
				t.Helper()
				switch {
				case tt.refuse && !errors.Is(err, pgstore.ErrSchemaTooNew):
					t.Fatalf("%s: got %v, want ErrSchemaTooNew", what, err)
				case !tt.refuse && err != nil:
					t.Fatalf("%s: %v", what, err)
				}
			}
			check("Migrate", pgstore.Migrate(ctx, pool))
			_, err := pgstore.New(ctx, pool, pgstore.WithoutMigrate())
			check("New WithoutMigrate", err)
			st, err := pgstore.New(ctx, pool)
			check("New", err)
			if after := schemaDump(t, pool); after != before {
				t.Fatalf("schema changed:\n%s\nwas:\n%s", after, before)
			}
			if tt.refuse {
				return
			}
			t.Cleanup(func() { st.Close() })
			runOneJob(t, st)
		})
	}
}

// runOneJob schedules a job on st, runs it with a Scheduler and waits for
// its success.
func runOneJob(t *testing.T, st *pgstore.Store) {
	t.Helper()
	s, err := ax.New(ax.Config{Store: st, PollInterval: 50 * time.Millisecond, FlushInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	ran := make(chan struct{}, 1)
	require.NoError(t, s.Handle("future.schema", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran <- struct{}{}
		return nil
	})))
	require.NoError(t, s.Start(ctxT(t)))
	defer func() { require.NoError(t, s.Stop(ctxT(t))) }()
	res, err := s.Schedule(ctxT(t), "future.schema", map[string]int{"n": 1})
	require.NoError(t, err)
	select {
	case <-ran:
	case <-ctxT(t).Done():
		t.Fatal("the job did not run")
	}
	require.Eventually(t, func() bool {
		rec, err := st.Get(ctxT(t), res.ID)
		return err == nil && rec.State == store.StateSucceeded
	}, 10*time.Second, 20*time.Millisecond, "the job's success was not written")
}

func TestWithoutMigrateNeedsSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
	for _, schema := range []string{"ax", "elsewhere"} { // a schema that does not exist, then one without AX's tables
		if schema == "elsewhere" {
			if _, err := pool.Exec(ctxT(t), `CREATE SCHEMA elsewhere`); err != nil {
				t.Fatal(err)
			}
		}
		_, err := pgstore.New(ctxT(t), pool, pgstore.WithSchema(schema), pgstore.WithoutMigrate())
		if !errors.Is(err, pgstore.ErrNoSchema) {
			t.Fatalf("New WithoutMigrate on schema %s of an empty database: got %v, want ErrNoSchema", schema, err)
		}
	}
}

func TestSchemaName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		schema string
		ok     bool
	}{
		{"Simple", "myapp", true},
		{"Underscores", "_my_app_2", true},
		{"Max63", strings.Repeat("a", 63), true},
		{"TooLong", strings.Repeat("a", 64), false},
		{"Empty", "", false},
		{"Upper", "MyApp", false},
		{"LeadingDigit", "1app", false},
		{"Quote", `ax"; DROP TABLE x; --`, false},
		{"Dot", "a.b", false},
		{"Dash", "my-app", false},
		{"Space", "my app", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a database of its own
			pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
			ctx := ctxT(t)
			s, err := pgstore.New(ctx, pool, pgstore.WithSchema(c.schema))
			var n int
			if qerr := pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, c.schema).Scan(&n); qerr != nil {
				t.Fatal(qerr)
			}
			if !c.ok {
				if !errors.Is(err, store.ErrInvalidParams) {
					t.Fatalf("got %v, want ErrInvalidParams", err)
				}
				var tables int
				if qerr := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`).Scan(&tables); qerr != nil {
					t.Fatal(qerr)
				}
				if n != 0 || tables != 0 {
					t.Fatalf("bad schema name created %d schemas, %d tables", n, tables)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if n != 1 || s.Schema() != c.schema {
				t.Fatalf("schema %q not created", c.schema)
			}
			p := job("in.schema")
			if _, err := s.Insert(ctx, []store.InsertParams{p}); err != nil {
				t.Fatal(err)
			}
			var kind string
			if err := pool.QueryRow(ctx, `SELECT kind FROM "`+c.schema+`".jobs WHERE id = $1`, [16]byte(p.ID)).Scan(&kind); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTwoSchemasShareADatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
	ctx := ctxT(t)
	a, err := pgstore.New(ctx, pool, pgstore.WithSchema("app_a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := pgstore.New(ctx, pool, pgstore.WithSchema("app_b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.Insert(ctx, []store.InsertParams{job("k")}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "k", Limit: 10}}, Limit: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 0 {
		t.Fatalf("store b claimed %d jobs of store a", len(res.Jobs))
	}
}

// TestMigrateFrom0001KeepsJobs upgrades a schema that migration 0001 made
// and a store of that version filled with jobs in every state: the jobs
// keep their state, times, attempts, errors and leases, get scheduled_at =
// run_at and fence = attempt, work on after the upgrade, and the schema
// ends up exactly like a fresh one.
// migrateAndOpen migrates the database of pool to the latest version and
// returns a Store on it that does not migrate, closed when t ends.
func migrateAndOpen(t *testing.T, pool *pgxpool.Pool) *pgstore.Store {
	t.Helper()
	if err := pgstore.Migrate(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(ctxT(t), pool, pgstore.WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestMigrateFrom0001KeepsJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
	ctx := ctxT(t)
	if err := pgstore.MigrateTo(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	type oldJob struct {
		state, payload, errors string
		attempt                int
		lease, final, cancel   bool
	}
	jobs := []oldJob{
		{state: "scheduled", payload: `{"b":1,  "a":[2, 3]}`, errors: `[]`},
		{state: "running", payload: `[1, 2]`, errors: `[]`, attempt: 1, lease: true},
		{state: "running", payload: `{}`, errors: `[]`, attempt: 2, lease: true, cancel: true},
		{state: "retrying", payload: `"x"`, errors: `[{"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": "boom"}]`, attempt: 1},
		{state: "paused", payload: `null`, errors: `[]`},
		{state: "succeeded", payload: `{"n": 1}`, errors: `[]`, attempt: 1, final: true},
		{state: "dead", payload: `{"n": 2}`, errors: `[{"attempt": 3, "at": "2030-01-01T00:00:00Z", "error": "fatal"}]`, attempt: 3, final: true},
		{state: "cancelled", payload: `{"n": 3}`, errors: `[]`, final: true},
	}
	runAt := time.Date(2020, 1, 2, 3, 4, 5, 678000, time.UTC) // due
	ids := make([]uuid.UUID, len(jobs))
	tokens := make([]*uuid.UUID, len(jobs))
	for i, j := range jobs {
		ids[i] = uuid.Must(uuid.NewV7())
		var attempted, expires, finished *time.Time
		if j.attempt > 0 {
			attempted = &runAt
		}
		if j.lease {
			tok, exp := uuid.New(), runAt.Add(time.Hour)
			tokens[i], expires = &tok, &exp
		}
		if j.final {
			finished = &runAt
		}
		// The columns and values a store of version 1 wrote.
		_, err := pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, metadata, state, priority, run_at,
			attempt, max_attempts, unique_key, errors, lease_token, lease_expires_at, owner, cancel_requested,
			created_at, attempted_at, finished_at)
			VALUES ($1::uuid, 'old.'||$2::text, $3::jsonb, '{"trace": "t"}', $2::text, 2, $4, $5, 5,
				'key-'||$2::text||$1::uuid::text, $6::jsonb,
				$7, $8, 'old-node', $9, $4, $10, $11)`,
			[16]byte(ids[i]), j.state, j.payload, runAt, j.attempt, j.errors, (*[16]byte)(tokens[i]), expires, j.cancel, attempted, finished)
		if err != nil {
			t.Fatal(err)
		}
	}

	st := migrateAndOpen(t, pool)
	for i, j := range jobs {
		got, err := st.Get(ctx, ids[i])
		if err != nil {
			t.Fatalf("%s job lost: %v", j.state, err)
		}
		var wantPayload, gotPayload any
		if err := json.Unmarshal([]byte(j.payload), &wantPayload); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got.Payload, &gotPayload); err != nil {
			t.Fatalf("%s job: payload %q: %v", j.state, got.Payload, err)
		}
		var token uuid.UUID
		if tokens[i] != nil {
			token = *tokens[i]
		}
		checks := []struct {
			what      string
			got, want any
		}{
			{"state", got.State, store.State(j.state)},
			{"run_at", got.RunAt.UTC(), runAt},
			{"scheduled_at", got.ScheduledAt.UTC(), runAt},
			{"attempt", got.Attempt, j.attempt},
			{"fence", got.Fence, int64(j.attempt)},
			{"pause requested", got.PauseRequested, false},
			{"cancel requested", got.CancelRequested, j.cancel},
			{"lease token", got.LeaseToken, token},
			{"payload", gotPayload, wantPayload},
			{"metadata", got.Metadata, map[string]string{"trace": "t"}},
			{"errors", len(got.Errors) == 0, j.errors == `[]`},
			{"finished", !got.FinishedAt.IsZero(), j.final},
			{"unique key", got.UniqueKey, "key-" + j.state + ids[i].String()},
			{"unique scope", got.Unique, store.UniqueScope{Finished: true}},
		}
		for _, c := range checks {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("%s job: %s = %v, want %v", j.state, c.what, c.got, c.want)
			}
		}
	}

	// The jobs work on: the running job's old lease finishes it, and the
	// scheduled job is claimed with the next fence.
	ok, err := st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: ids[1], Token: *tokens[1]}, Outcome: store.OutcomeSucceeded}})
	if err != nil || !ok[0] {
		t.Fatalf("finish a job running across the upgrade: %v %v", ok, err)
	}
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "new-node", Kinds: []store.KindLimit{{Kind: "old.scheduled", Limit: 1}},
		Limit: 1, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].Fence != 1 || !res.Jobs[0].ScheduledAt.Equal(runAt) {
		t.Fatalf("claim after the upgrade: %+v", res.Jobs)
	}

	// Migration 0004 made the old keys per kind and held until pruned:
	// each non-cancelled job holds its key against a new job of its kind
	// in the default scope, finished ones included; a cancelled job, or a
	// job of another kind, does not.
	for i, j := range jobs {
		key := "key-" + j.state + ids[i].String()
		for _, kind := range []string{"old." + j.state, "new"} {
			p := job(kind)
			p.UniqueKey = key
			res, err := st.Insert(ctx, []store.InsertParams{p})
			if err != nil {
				t.Fatal(err)
			}
			want := store.InsertResult{ID: p.ID}
			if kind != "new" && j.state != "cancelled" {
				want = store.InsertResult{ID: ids[i], Duplicate: true}
			}
			if res[0] != want {
				t.Errorf("%s job's key, inserted for kind %s: %+v, want %+v", j.state, kind, res[0], want)
			}
		}
	}

	if got, want := schemaDump(t, pool), schemaDump(t, pgtest.Pool(t)); got != want {
		t.Fatalf("upgraded schema differs from a fresh one:\n%s\nwant:\n%s", got, want)
	}
}

// v1Schema is the schema version v1.0.0 shipped (CHANGELOG.md); every
// later migration must keep older v1 code running (docs/compatibility.md).
const v1Schema = 15

// TestV1MigrationsSayTheyAreCompatible: every migration after v1.0.0's
// declares which older code still runs on it ("-- ax:compatible-from N"
// with N at most v1.0.0's version), so that v1 hosts restarted during a
// rolling deploy start. A migration without it would make them refuse.
func TestV1MigrationsSayTheyAreCompatible(t *testing.T) {
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	directive := regexp.MustCompile(`(?m)^-- ax:compatible-from ([0-9]+)\s*$`)
	for _, e := range entries {
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil || v <= v1Schema {
			continue
		}
		b, err := os.ReadFile(filepath.Join("migrations", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m := directive.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: a v1 migration must say '-- ax:compatible-from N' (N <= %d): additive only, see docs/compatibility.md", e.Name(), v1Schema)
			continue
		}
		if n, _ := strconv.Atoi(string(m[1])); n > v1Schema {
			t.Errorf("%s: compatible from %d; v1.0.0 code (schema %d) must keep running", e.Name(), n, v1Schema)
		}
	}
	if pgstore.SchemaVersion() < v1Schema {
		t.Fatalf("schema version %d is below v1.0.0's %d", pgstore.SchemaVersion(), v1Schema)
	}
}
