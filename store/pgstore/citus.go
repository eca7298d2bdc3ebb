package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
)

// The errors of the Citus constructor and migration. Each is returned
// wrapped, with what was found; match them with errors.Is.
var (
	// ErrDistributed means New or Migrate was given a schema that
	// MigrateCitus distributed: its statements would be refused by
	// Citus's planner. Use NewCitus and MigrateCitus on it.
	ErrDistributed = errors.New("pgstore: the schema is distributed by Citus: use NewCitus (and MigrateCitus)")

	// ErrNotCitus means NewCitus or MigrateCitus was given a database
	// without the citus extension: use New and Migrate, or point the
	// pool at a Citus coordinator.
	ErrNotCitus = errors.New("pgstore: the database has no Citus (no citus extension): use New, or connect to a Citus coordinator")

	// ErrNotCoordinator means the connection reaches a Citus worker node,
	// not the coordinator. The Citus store keeps its plain tables
	// (leader, nodes, kinds), its advisory locks and its LISTEN on the
	// coordinator, so every connection must go there, the listener's
	// (WithListenerConnString) included.
	ErrNotCoordinator = errors.New("pgstore: the connection reaches a Citus worker, not the coordinator")

	// ErrCitusVersion means the Citus extension is older than
	// MinCitusVersion, the oldest one the Citus store is tested on.
	ErrCitusVersion = errors.New("pgstore: Citus is older than the Citus store supports")

	// ErrNotDistributed means NewCitus was given a schema that
	// MigrateCitus did not distribute (or whose distribution was changed
	// by hand): run MigrateCitus, or use New.
	ErrNotDistributed = errors.New("pgstore: the schema is not distributed for the Citus store: run MigrateCitus")

	// ErrCitusUnsupported means something the Citus store does not do
	// yet was asked of it: an option of New it cannot honour, or a
	// migration it cannot apply to a distributed schema.
	ErrCitusUnsupported = errors.New("pgstore: not supported by the Citus store")
)

// MinCitusVersion is the oldest Citus (major.minor of the citus
// extension) that NewCitus and MigrateCitus accept: the one their tests
// run on.
const MinCitusVersion = "13.2"

// minCitusVersion is MinCitusVersion, a variable so that a test can raise
// it to see the refusal on the cluster it has.
var minCitusVersion = MinCitusVersion

// CitusStore is the store for a Citus cluster (distributed PostgreSQL):
// jobs and their history are spread over the cluster's worker nodes by a
// column, shard, that the store chooses at insert, so that every hot
// statement runs on one shard. Create it with NewCitus on a schema that
// MigrateCitus prepared. It is safe for concurrent use.
//
// It implements store.Store and fewer optional interfaces than Store:
// what it lacks (follow-ups, batches, flow control, sequences, early
// start, claim-with-insert, claims with outcomes) the runtime refuses at
// registration, never on a job (docs/citus.md, "What it does and what it
// refuses").
type CitusStore struct {
	s      *Store   // the statements that name no shard, the lifecycle
	placed []*Store // by slot: statements placed on its shard (placement.go)

	slotByValue map[int32]int // a value of shard → its slot

	turn atomic.Uint64 // turns the shard a claim starts at
}

// NewCitus returns a CitusStore on pool, whose connections must reach the
// coordinator of a Citus cluster (MinCitusVersion or later) where
// MigrateCitus prepared the schema. NewCitus never migrates: distributing
// is a deploy step (MigrateCitus, or ax migrate up --citus).
//
// It writes nothing, and refuses with an error wrapping:
//   - store.ErrInvalidParams, for a nil pool, a bad schema name, or a
//     pool in QueryExecModeExec or QueryExecModeSimpleProtocol (as New);
//   - ErrCitusUnsupported (and store.ErrInvalidParams), for the options
//     it cannot honour: WithEarlyDirectStart (its WAL flush would reach
//     the coordinator, not the worker holding the job),
//     WithAsyncClaimsAndOutcomes (the setting would bind the coordinator
//     only) and WithTransactionPooler (untested through a pooler);
//   - ErrNotCitus, when the database has no citus extension;
//   - ErrNotCoordinator, when the pool or the listener's connection
//     (WithListenerConnString) reaches a worker node;
//   - ErrCitusVersion, when Citus is older than MinCitusVersion;
//   - ErrNoSchema, when the schema holds no AX tables;
//   - ErrNotDistributed, when the schema is not distributed as
//     MigrateCitus leaves it (jobs and jobs_history by shard, co-located,
//     one placement per shard);
//   - ErrSchemaTooNew or ErrCitusUnsupported, when the schema is not at
//     this code's version.
func NewCitus(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*CitusStore, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgstore: NewCitus: nil pool: %w", store.ErrInvalidParams)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	for _, u := range []struct {
		set  bool
		name string
	}{
		{o.earlyStart, "WithEarlyDirectStart"},
		{o.asyncCommits, "WithAsyncClaimsAndOutcomes"},
		{o.txPooler, "WithTransactionPooler"},
	} {
		if u.set {
			return nil, fmt.Errorf("pgstore: NewCitus: option %s: %w (%w)", u.name, ErrCitusUnsupported, store.ErrInvalidParams)
		}
	}
	if err := checkTypedMode(pool, "NewCitus"); err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: connect to the Citus coordinator at %s: %w", poolAddr(pool), err)
	}
	if err := checkCitus(ctx, pool, "NewCitus on "+poolAddr(pool)); err != nil {
		return nil, err
	}
	if o.listenerDSN != "" {
		if err := checkListenerCitus(ctx, o.listenerDSN); err != nil {
			return nil, err
		}
	}
	slots, err := readSlots(ctx, pool, o.schema)
	if err != nil {
		return nil, err
	}
	if err := checkCitusVersion(ctx, pool, o.schema); err != nil {
		return nil, err
	}
	salt := make([]byte, 8)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("pgstore: NewCitus: %w", err)
	}
	c := &CitusStore{s: newStore(pool, o), slotByValue: map[int32]int{}}
	for slot, value := range slots {
		c.slotByValue[value] = slot
		p := newStore(pool, o)
		p.place = &placement{slot: slot, value: value, salt: hex.EncodeToString(salt)}
		p.q = buildQueries(o.schema, p.place)
		c.placed = append(c.placed, p)
	}
	return c, nil
}

// Schema returns the PostgreSQL schema holding the store's tables.
func (c *CitusStore) Schema() string { return c.s.schema }

// Slots returns the number of slots jobs are placed in: one per Citus
// shard of jobs.
func (c *CitusStore) Slots() int { return len(c.placed) }

// Close makes later calls return store.ErrClosed. It does not close the
// pool. It is safe to call more than once.
func (c *CitusStore) Close() error {
	for _, p := range c.placed {
		p.Close()
	}
	return c.s.Close()
}

// checkCitus reports whether q reaches the coordinator of a Citus cluster
// of MinCitusVersion or later; where names the caller and the connection
// in its errors.
func checkCitus(ctx context.Context, q querier, where string) error {
	var version string
	err := q.QueryRow(ctx, `SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = 'citus'), '')`).Scan(&version)
	if err != nil {
		return fmt.Errorf("pgstore: %s: read the citus extension: %w", where, err)
	}
	if version == "" {
		return fmt.Errorf("%w (%s)", ErrNotCitus, where)
	}
	if !citusVersionAtLeast(version, minCitusVersion) {
		return fmt.Errorf("%w: the citus extension is at %s, the oldest supported is %s (%s)", ErrCitusVersion, version, minCitusVersion, where)
	}
	var coordinator bool
	if err := q.QueryRow(ctx, `SELECT citus_is_coordinator()`).Scan(&coordinator); err != nil {
		return fmt.Errorf("pgstore: %s: ask Citus whether this is the coordinator: %w", where, err)
	}
	if !coordinator {
		return fmt.Errorf("%w (%s)", ErrNotCoordinator, where)
	}
	return nil
}

// poolAddr names the server pool connects to, for errors.
func poolAddr(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	return fmt.Sprintf("%s:%d", cc.Host, cc.Port)
}

// checkListenerCitus checks that the listener's connection string reaches
// the coordinator too: notifications are sent there.
func checkListenerCitus(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("pgstore: NewCitus: connect the listener (WithListenerConnString): %w", err)
	}
	defer conn.Close(context.Background())
	cc := conn.Config()
	return checkCitus(ctx, conn, fmt.Sprintf("NewCitus: the listener's connection (WithListenerConnString) to %s:%d", cc.Host, cc.Port))
}

// citusVersionAtLeast reports whether the citus extension's version (such
// as "13.2-1": major.minor, then Citus's own revision of the SQL) is min
// ("13.2") or later. A version it cannot read is not.
func citusVersionAtLeast(version, min string) bool {
	parse := func(v string) (major, minor int, ok bool) {
		v, _, _ = strings.Cut(v, "-")
		a, b, found := strings.Cut(v, ".")
		if !found {
			return 0, 0, false
		}
		b, _, _ = strings.Cut(b, ".")
		x, err1 := strconv.Atoi(a)
		y, err2 := strconv.Atoi(b)
		return x, y, err1 == nil && err2 == nil
	}
	vx, vy, ok := parse(version)
	mx, my, okMin := parse(min)
	if !ok || !okMin {
		return false
	}
	return vx > mx || vx == mx && vy >= my
}

// isDistributed reports whether the schema's jobs table is a Citus
// distributed table. On a PostgreSQL without Citus it costs one query.
func isDistributed(ctx context.Context, q querier, schema string) (bool, error) {
	var citus bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		return false, fmt.Errorf("look for Citus: %w", err)
	}
	if !citus {
		return false, nil
	}
	var distributed bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass($1))`,
		pgx.Identifier{schema, "jobs"}.Sanitize()).Scan(&distributed)
	if err != nil {
		return false, fmt.Errorf("ask Citus whether %s.jobs is distributed: %w", schema, err)
	}
	return distributed, nil
}

// refuseDistributed returns an error wrapping ErrDistributed when the
// schema's jobs table is distributed by Citus: New's and Migrate's
// statements are plain PostgreSQL's, which Citus's planner refuses or
// runs without the guarantees they were written for.
func refuseDistributed(ctx context.Context, q querier, schema string) error {
	distributed, err := isDistributed(ctx, q, schema)
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if distributed {
		return fmt.Errorf("%w (schema %q)", ErrDistributed, schema)
	}
	return nil
}

// readSlots checks that the schema is laid out as MigrateCitus leaves it
// and returns its slots' values of shard, by slot.
func readSlots(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int32, error) {
	s := pgx.Identifier{schema}.Sanitize()
	var hasVersion, hasSteps bool
	err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		s+".schema_version", s+".citus_steps").Scan(&hasVersion, &hasSteps)
	if err != nil {
		return nil, fmt.Errorf("pgstore: NewCitus: %w", err)
	}
	if !hasVersion {
		return nil, fmt.Errorf("%w (schema %q has no schema_version table)", ErrNoSchema, schema)
	}
	if !hasSteps {
		return nil, fmt.Errorf("%w (schema %q has no citus_steps table)", ErrNotDistributed, schema)
	}
	// One row per table MigrateCitus distributes: how, and with what.
	rows, _ := pool.Query(ctx, `SELECT t.name,
			coalesce(column_to_column_name(p.logicalrelid, p.partkey), ''),
			coalesce(p.partmethod::text, ''),
			coalesce(p.colocationid, -1),
			coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM pg_dist_shard d JOIN pg_dist_placement pl USING (shardid)
				WHERE d.logicalrelid = p.logicalrelid GROUP BY shardid) c), 0)
		FROM unnest($1::text[]) t(name)
		LEFT JOIN pg_dist_partition p ON p.logicalrelid = to_regclass($2 || '.' || t.name)
		ORDER BY t.name`, []string{"jobs", "jobs_history"}, s)
	type layout struct {
		Table      string
		Column     string
		Method     string
		Colocation int32
		Placements int64
	}
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[layout])
	if err != nil {
		return nil, fmt.Errorf("pgstore: NewCitus: read the distribution of schema %q: %w", schema, err)
	}
	for _, tb := range tables {
		switch {
		case tb.Method == "":
			return nil, fmt.Errorf("%w: %s.%s is not a distributed table", ErrNotDistributed, schema, tb.Table)
		case tb.Method != "h" || tb.Column != "shard":
			return nil, fmt.Errorf("%w: %s.%s is distributed by %q (method %s), want hash of shard", ErrNotDistributed, schema, tb.Table, tb.Column, tb.Method)
		case tb.Placements > 1:
			// Citus refuses FOR UPDATE on replicated shards.
			return nil, fmt.Errorf("%w: %s.%s has %d placements of a shard, want 1 (citus.shard_replication_factor = 1)", ErrNotDistributed, schema, tb.Table, tb.Placements)
		}
	}
	if tables[0].Colocation != tables[1].Colocation {
		return nil, fmt.Errorf("%w: %s.jobs and %s.jobs_history are not co-located", ErrNotDistributed, schema, schema)
	}
	rows, _ = pool.Query(ctx, `SELECT value FROM `+s+`.citus_slots ORDER BY slot`)
	slots, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("pgstore: NewCitus: read the slots of schema %q: %w", schema, err)
	}
	if len(slots) == 0 || len(slots) > 1<<16 {
		// A lease token names its slot in 16 bits (placement.go).
		return nil, fmt.Errorf("%w: schema %q has %d slots, want 1 to 65536", ErrNotDistributed, schema, len(slots))
	}
	return slots, nil
}

// slotsWhere returns, in slot order, the slots of the shards that the
// statement sql (SELECT DISTINCT shard …, over every shard) lists.
func (c *CitusStore) slotsWhere(ctx context.Context, sql string) ([]int, error) {
	rows, err := c.s.pool.Query(ctx, c.s.sql(sql))
	if err != nil {
		return nil, err
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	slots := make([]int, 0, len(values))
	for _, v := range values {
		slot, ok := c.slotByValue[v]
		if !ok {
			return nil, fmt.Errorf("shard %d is no slot of this store", v)
		}
		slots = append(slots, slot)
	}
	slices.Sort(slots)
	return slots, nil
}
