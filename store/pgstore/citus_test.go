package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// citusSchema returns a pool on the Citus coordinator and a schema of it
// that MigrateCitus distributed, dropped when t ends.
// citusStore returns a CitusStore on a fresh distributed schema
// (citusSchema), closed when t ends, with its pool and schema.
func citusStore(t testing.TB) (*pgxpool.Pool, string, *pgstore.CitusStore) {
	t.Helper()
	pool, schema := citusSchema(t)
	st, err := pgstore.NewCitus(ctxT(t), pool, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return pool, schema, st
}

func citusSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool, name := citustest.Schema(t)
	if err := pgstore.MigrateCitus(ctxT(t), pool, pgstore.WithSchema(name)); err != nil {
		t.Fatalf("MigrateCitus: %v", err)
	}
	return pool, name
}

// fingerprint describes what the refusals must not change in schema: its
// relations, its recorded versions and Citus steps, and which of its
// tables Citus distributes.
func fingerprint(t testing.TB, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	var rels, dist string
	err := pool.QueryRow(ctxT(t), `SELECT
		coalesce((SELECT string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1), ''),
		''`, schema).Scan(&rels, &dist)
	if err != nil {
		t.Fatal(err)
	}
	var citus bool
	if err := pool.QueryRow(ctxT(t), `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		t.Fatal(err)
	}
	if citus {
		err := pool.QueryRow(ctxT(t), `SELECT coalesce(string_agg(logicalrelid::text || ':' || colocationid, ',' ORDER BY logicalrelid::text), '')
			FROM pg_dist_partition WHERE logicalrelid::text LIKE $1 || '.%'`, schema).Scan(&dist)
		if err != nil {
			t.Fatal(err)
		}
	}
	versions := ""
	for _, tb := range []string{"schema_version", "citus_steps"} {
		var n int
		err := pool.QueryRow(ctxT(t), `SELECT CASE WHEN to_regclass($1) IS NULL THEN -1 ELSE 0 END`, schema+"."+tb).Scan(&n)
		if err == nil && n == 0 {
			err = pool.QueryRow(ctxT(t), `SELECT count(*) FROM `+pgx.Identifier{schema, tb}.Sanitize()).Scan(&n)
		}
		if err != nil {
			t.Fatal(err)
		}
		versions += fmt.Sprintf(" %s=%d", tb, n)
	}
	return rels + " | " + dist + " |" + versions
}

// TestMigrateCitus checks the layout MigrateCitus leaves: jobs and
// jobs_history distributed by shard, co-located, on every worker; one
// slot per shard, each hashing into its own; no trigger left on jobs;
// shard in the primary key and every unique index; jobs_all carrying
// shard. And that a second run changes nothing.
func TestMigrateCitus(t *testing.T) {
	t.Parallel()
	pool, schema := citusSchema(t)
	ctx := ctxT(t)
	before := fingerprint(t, pool, schema)
	if err := pgstore.MigrateCitus(ctx, pool, pgstore.WithSchema(schema)); err != nil {
		t.Fatalf("second MigrateCitus: %v", err)
	}
	if after := fingerprint(t, pool, schema); after != before {
		t.Errorf("second MigrateCitus changed the schema:\n%s\nwant:\n%s", after, before)
	}
	// S stands for the schema's name, in the statements and the results.
	for _, c := range []struct {
		what, sql string
		want      string
	}{
		{"distribution", `SELECT string_agg(logicalrelid::text || ' by ' || column_to_column_name(logicalrelid, partkey), ', ' ORDER BY logicalrelid::text)
			FROM pg_dist_partition WHERE logicalrelid IN ('S.jobs'::regclass, 'S.jobs_history'::regclass)`, "S.jobs by shard, S.jobs_history by shard"},
		{"co-location", `SELECT count(DISTINCT colocationid)::text FROM pg_dist_partition
			WHERE logicalrelid IN ('S.jobs'::regclass, 'S.jobs_history'::regclass)`, "1"},
		{"shards on every worker", `SELECT (count(DISTINCT nodeport) = (SELECT count(*) FROM pg_dist_node WHERE groupid <> 0 AND isactive))::text
			FROM citus_shards WHERE table_name = 'S.jobs'::regclass`, "true"},
		{"one slot per shard", `SELECT (count(*) = count(DISTINCT get_shard_id_for_distribution_column('S.jobs', value))
			AND count(*) = (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'S.jobs'::regclass))::text FROM S.citus_slots`, "true"},
		{"triggers", `SELECT count(*)::text FROM pg_trigger WHERE tgrelid IN ('S.jobs'::regclass, 'S.jobs_history'::regclass) AND NOT tgisinternal`, "0"},
		{"unique indexes without shard", `SELECT count(*)::text FROM pg_index i WHERE i.indrelid = 'S.jobs'::regclass AND i.indisunique
			AND NOT (SELECT attnum FROM pg_attribute WHERE attrelid = 'S.jobs'::regclass AND attname = 'shard') = ANY (i.indkey)`, "0"},
		{"primary key", `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'S.jobs'::regclass AND contype = 'p'`, "PRIMARY KEY (shard, id)"},
		{"jobs_all", `SELECT count(*)::text FROM pg_attribute WHERE attrelid = 'S.jobs_all'::regclass AND attname = 'shard'`, "1"},
	} {
		var got string
		if err := pool.QueryRow(ctx, strings.ReplaceAll(c.sql, "S.", schema+".")).Scan(&got); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got = strings.ReplaceAll(got, schema+".", "S."); got != c.want {
			t.Errorf("%s: got %s, want %s", c.what, got, c.want)
		}
	}
}

// TestMigrateCitusConcurrently: hosts that deploy at once all run
// MigrateCitus on the same new schema; the advisory lock lets one
// distribute it, and the others find it done.
func TestMigrateCitusConcurrently(t *testing.T) {
	t.Parallel()
	pool, schema := citustest.Schema(t)
	ctx := ctxT(t)
	errs := make(chan error, 3)
	for range cap(errs) {
		go func() { errs <- pgstore.MigrateCitus(ctx, pool, pgstore.WithSchema(schema)) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// TestCitusRefusals checks every refusal of NewCitus, MigrateCitus, New
// and Migrate that a Citus cluster (and a plain PostgreSQL) can show: the
// error matches its sentinel, and the schema is left as it was. Not
// parallel: it raises the package's minimum Citus version for a moment.
func TestCitusRefusals(t *testing.T) {
	ctx := ctxT(t)
	pool, schema := citusSchema(t)
	workers := citustest.WorkerURLs(t)
	worker := citustest.PoolFor(t, workers[0])
	_, plainSchema := citustest.Schema(t) // migrated by Migrate: plain tables on the coordinator
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(plainSchema)); err != nil {
		t.Fatal(err)
	}
	_, emptySchema := citustest.Schema(t)
	on := func(s string) []pgstore.Option { return []pgstore.Option{pgstore.WithSchema(s)} }
	newCitus := func(p *pgxpool.Pool, opts ...pgstore.Option) error {
		c, err := pgstore.NewCitus(ctx, p, opts...)
		if err == nil {
			c.Close()
		}
		return err
	}
	newPlain := func(p *pgxpool.Pool, opts ...pgstore.Option) error {
		s, err := pgstore.New(ctx, p, opts...)
		if err == nil {
			s.Close()
		}
		return err
	}
	migrate := func(p *pgxpool.Pool, opts ...pgstore.Option) error { return pgstore.Migrate(ctx, p, opts...) }
	migrateCitus := func(p *pgxpool.Pool, opts ...pgstore.Option) error { return pgstore.MigrateCitus(ctx, p, opts...) }
	exec := func(sql string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			if _, err := pool.Exec(ctx, strings.ReplaceAll(sql, "S.", schema+".")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name   string
		call   func(*pgxpool.Pool, ...pgstore.Option) error
		pool   *pgxpool.Pool
		schema string
		opts   []pgstore.Option
		setup  func(*testing.T) // changes the schema; undo puts it back
		undo   func(*testing.T)
		want   []error // nil: accepted
	}{
		{name: "NewCitus", call: newCitus, pool: pool, schema: schema},
		{name: "NewCitus/EarlyDirectStart", call: newCitus, pool: pool, schema: schema, opts: []pgstore.Option{pgstore.WithEarlyDirectStart()},
			want: []error{pgstore.ErrCitusUnsupported, store.ErrInvalidParams}},
		{name: "NewCitus/AsyncClaimsAndOutcomes", call: newCitus, pool: pool, schema: schema, opts: []pgstore.Option{pgstore.WithAsyncClaimsAndOutcomes()},
			want: []error{pgstore.ErrCitusUnsupported, store.ErrInvalidParams}},
		{name: "NewCitus/TransactionPooler", call: newCitus, pool: pool, schema: schema, opts: []pgstore.Option{pgstore.WithTransactionPooler()},
			want: []error{pgstore.ErrCitusUnsupported, store.ErrInvalidParams}},
		{name: "NewCitus/Worker", call: newCitus, pool: worker, schema: schema, want: []error{pgstore.ErrNotCoordinator}},
		{name: "NewCitus/WorkerListener", call: newCitus, pool: pool, schema: schema, opts: []pgstore.Option{pgstore.WithListenerConnString(workers[0])},
			want: []error{pgstore.ErrNotCoordinator}},
		{name: "NewCitus/OldCitus", call: newCitus, pool: pool, schema: schema,
			setup: func(*testing.T) { restoreMin = pgstore.SetMinCitusVersion("99.0") }, undo: func(*testing.T) { restoreMin() },
			want: []error{pgstore.ErrCitusVersion}},
		{name: "NewCitus/PlainSchema", call: newCitus, pool: pool, schema: plainSchema, want: []error{pgstore.ErrNotDistributed}},
		{name: "NewCitus/NoSchema", call: newCitus, pool: pool, schema: emptySchema, want: []error{pgstore.ErrNoSchema}},
		{name: "NewCitus/NotColocated", call: newCitus, pool: pool, schema: schema,
			setup: exec(`SELECT update_distributed_table_colocation('S.jobs_history', colocate_with => 'none')`),
			undo:  exec(`SELECT update_distributed_table_colocation('S.jobs_history', colocate_with => 'S.jobs')`),
			want:  []error{pgstore.ErrNotDistributed}},
		{name: "NewCitus/SchemaBehind", call: newCitus, pool: pool, schema: schema,
			setup: exec(`CREATE TABLE S.saved AS SELECT * FROM S.schema_version WHERE version = (SELECT max(version) FROM S.schema_version);
				DELETE FROM S.schema_version WHERE version = (SELECT version FROM S.saved)`),
			undo: exec(`INSERT INTO S.schema_version SELECT * FROM S.saved; DROP TABLE S.saved`),
			want: []error{pgstore.ErrCitusUnsupported}},
		{name: "NewCitus/CitusStepAhead", call: newCitus, pool: pool, schema: schema,
			setup: exec(`INSERT INTO S.citus_steps (step, name) VALUES (1000, 'future')`),
			undo:  exec(`DELETE FROM S.citus_steps WHERE step = 1000`),
			want:  []error{pgstore.ErrSchemaTooNew}},
		{name: "New/Distributed", call: newPlain, pool: pool, schema: schema, want: []error{pgstore.ErrDistributed}},
		{name: "New/DistributedWithoutMigrate", call: newPlain, pool: pool, schema: schema, opts: []pgstore.Option{pgstore.WithoutMigrate()},
			want: []error{pgstore.ErrDistributed}},
		{name: "New/PlainSchemaOnCoordinator", call: newPlain, pool: pool, schema: plainSchema},
		{name: "Migrate/Distributed", call: migrate, pool: pool, schema: schema, want: []error{pgstore.ErrDistributed}},
		{name: "MigrateCitus/Worker", call: migrateCitus, pool: worker, schema: emptySchema, want: []error{pgstore.ErrNotCoordinator}},
		{name: "MigrateCitus/OldCitus", call: migrateCitus, pool: pool, schema: emptySchema,
			setup: func(*testing.T) { restoreMin = pgstore.SetMinCitusVersion("99.0") }, undo: func(*testing.T) { restoreMin() },
			want: []error{pgstore.ErrCitusVersion}},
		{name: "MigrateCitus/SchemaWithJobs", call: migrateCitus, pool: pool, schema: plainSchema,
			setup: func(t *testing.T) {
				exec(`INSERT INTO ` + plainSchema + `.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
					VALUES (gen_random_uuid(), 'k', '{}', 2, now(), now(), 1)`)(t)
			},
			undo: exec(`DELETE FROM ` + plainSchema + `.jobs`),
			want: []error{pgstore.ErrCitusUnsupported}},
		{name: "MigrateCitus/Distributed", call: migrateCitus, pool: pool, schema: schema},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup(t)
				t.Cleanup(func() { c.undo(t) })
			}
			before := fingerprint(t, pool, c.schema)
			err := c.call(c.pool, append(on(c.schema), c.opts...)...)
			for _, want := range c.want {
				if !errors.Is(err, want) {
					t.Errorf("got %v, want an error wrapping %v", err, want)
				}
			}
			if c.want == nil && err != nil {
				t.Errorf("refused: %v", err)
			}
			if after := fingerprint(t, pool, c.schema); after != before {
				t.Errorf("the schema changed:\n%s\nwant:\n%s", after, before)
			}
			t.Logf("%v", err)
		})
	}
}

// restoreMin undoes SetMinCitusVersion in TestCitusRefusals.
var restoreMin func()

// TestCitusRefusalsOnPlainPostgres: the Citus constructor and migration
// on a PostgreSQL without Citus refuse, writing nothing.
func TestCitusRefusalsOnPlainPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := ctxT(t)
	before := fingerprint(t, pool, pgstore.DefaultSchema)
	for name, call := range map[string]func() error{
		"NewCitus": func() error {
			c, err := pgstore.NewCitus(ctx, pool)
			if err == nil {
				c.Close()
			}
			return err
		},
		"MigrateCitus": func() error { return pgstore.MigrateCitus(ctx, pool) },
	} {
		if err := call(); !errors.Is(err, pgstore.ErrNotCitus) {
			t.Errorf("%s: got %v, want an error wrapping ErrNotCitus", name, err)
		}
	}
	if after := fingerprint(t, pool, pgstore.DefaultSchema); after != before {
		t.Errorf("the schema changed:\n%s\nwant:\n%s", after, before)
	}
}

// TestCitusVersionAtLeast reads the citus extension's versions.
func TestCitusVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		version, min string
		want         bool
	}{
		{"13.2-1", "13.2", true},
		{"13.2", "13.2", true},
		{"13.10-1", "13.2", true},
		{"14.0-1", "13.2", true},
		{"13.1-1", "13.2", false},
		{"12.1-1", "13.2", false},
		{"13", "13.2", false},
		{"", "13.2", false},
		{"x.y", "13.2", false},
	} {
		if got := pgstore.CitusVersionAtLeast(c.version, c.min); got != c.want {
			t.Errorf("CitusVersionAtLeast(%q, %q) = %v, want %v", c.version, c.min, got, c.want)
		}
	}
}

// TestTokenCarriesSlot: the token a placed claim gives (placement.go's
// tokenSQL, evaluated by PostgreSQL over a job's ID and fence) carries its
// slot for tokenSlot, and differs by fence and by salt.
func TestTokenCarriesSlot(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, slot := range []int{0, 1, 31, 1000, 65535} {
		tokens := map[string]bool{}
		for _, c := range []struct {
			fence int
			salt  string
		}{{1, "aa"}, {2, "aa"}, {1, "bb"}} {
			var token uuid.UUID
			err := pool.QueryRow(ctxT(t), `SELECT `+pgstore.TokenSQL(slot, c.salt)+`
				FROM (SELECT '0190d7a4-9d36-7000-8000-000000000001'::uuid AS id, $1::bigint AS fence) j`, c.fence).Scan((*[16]byte)(&token))
			if err != nil {
				t.Fatal(err)
			}
			if got := pgstore.TokenSlot(token); got != slot {
				t.Errorf("token %s carries slot %d, want %d", token, got, slot)
			}
			tokens[token.String()] = true
		}
		if len(tokens) != 3 {
			t.Errorf("slot %d: %d distinct tokens for 3 fences and salts, want 3", slot, len(tokens))
		}
	}
}
