package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
)

// Store is the PostgreSQL store.Store. It is safe for concurrent use; many
// processes may share one database (and schema). Create it with New.
type Store struct {
	pool    *pgxpool.Pool
	schema  string
	channel string // NOTIFY channel: the schema name
	q       queries
	opts    *options

	closed atomic.Bool

	lmu           sync.Mutex // guards listener lifecycle and auditing
	listener      *listener
	listenerProbe listenerProbe // when a quiet listener connection must answer (notifier.go)
	// life ends when the Store closes; it bounds the work the Store
	// runs on its own (cursor audits), which Close waits for (audits).
	life     context.Context
	endLife  context.CancelFunc
	auditing bool // a cursor audit runs (cursoraudit.go)
	audits   sync.WaitGroup

	flow flowCache // flow control (flow.go)

	cursors *claimCursors // where the plain claim's range scans start (cursor.go)
	spare   claimSpare    // rows the open claim reads beyond its limits (claimopen.go)
	// agedMixed: kinds whose claims make the open claim for a while
	// (agedmixed.go).
	agedMixed agedMixedKinds

	history historyState // partitions and archive position (history.go)

	leases *leaseConn // ExtendLeases' own connection, outside the pool (leaseconn.go)

	place *placement // the slot the statements run on (Citus), or nil (placement.go)
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
	_ store.Pruner   = (*Store)(nil)
	_ store.Lister   = (*Store)(nil)
	_ store.Counter  = (*Store)(nil)
	_ store.Closer   = (*Store)(nil)
)

// New returns a Store on pool. A pool in pgx's QueryExecModeExec or
// QueryExecModeSimpleProtocol is refused before anything is sent, with an
// error wrapping store.ErrInvalidParams: pgx cannot send pgstore's IDs
// and payloads in those modes (WithTransactionPooler says which mode a
// pooler needs). It pings the database (an unreachable one is
// an error naming its host and port) and, unless WithoutMigrate is given,
// runs Migrate with the same options; with WithoutMigrate it checks that the
// schema is at SchemaVersion. A schema that MigrateCitus distributed is
// refused, before anything is written, with an error wrapping
// ErrDistributed: use NewCitus on it. New starts no goroutine and opens no
// connection of its own: the listener starts with the first Subscribe, and
// only while it listens do claims audit their cursors beside them
// (cursor.go); the lease connection opens with the first ExtendLeases
// (leaseconn.go).
//
// The pool stays the caller's: Close does not close it. Size it for the
// handlers that use it too (see the package doc's "Connections").
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgstore: nil pool: %w", store.ErrInvalidParams)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkPoolerMode(pool, o); err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		cc := pool.Config().ConnConfig
		return nil, fmt.Errorf("pgstore: connect to PostgreSQL at %s:%d: %w", cc.Host, cc.Port, err)
	}
	if o.noMigrate {
		err = checkVersion(ctx, pool, o.schema)
	} else {
		err = Migrate(ctx, pool, WithSchema(o.schema))
	}
	if err != nil {
		return nil, err
	}
	if o.earlyStart {
		if err := checkEarlyStart(ctx, pool); err != nil {
			return nil, err
		}
	}
	return newStore(pool, o), nil
}

// newStore returns a Store on pool with options o, checked by its caller
// (New, NewCitus). It starts nothing and opens no connection.
func newStore(pool *pgxpool.Pool, o *options) *Store {
	life, endLife := context.WithCancel(context.Background())
	s := &Store{
		pool:    pool,
		schema:  o.schema,
		channel: o.schema,
		q:       buildQueries(o.schema, nil),
		opts:    o,
		cursors: newClaimCursors(),
		life:    life,
		endLife: endLife,

		listenerProbe: defaultListenerProbe,
	}
	s.leases = newLeaseConn(s.dialLeaseConn, pool.Config().MaxConnLifetime, time.Now)
	return s
}

// Schema returns the PostgreSQL schema holding the Store's tables.
func (s *Store) Schema() string { return s.schema }

// Close stops the listener (ending every subscription), closes the lease
// connection (at once when idle, otherwise as soon as the ExtendLeases
// using it returns) and makes later calls return store.ErrClosed. It does
// not close the pool. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.lmu.Lock()
	l := s.listener
	s.listener = nil
	s.lmu.Unlock()
	if l != nil {
		l.stop()
	}
	s.leases.close()
	s.endLife()
	s.audits.Wait()
	return nil
}

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// Now returns the database's clock (statement_timestamp()).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := s.check(); err != nil {
		return time.Time{}, err
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("pgstore: now: %w", err)
	}
	return now, nil
}

// Get returns the job with the given ID, or an error wrapping
// store.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*store.JobRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, s.q.get, [16]byte(id))
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: get job %s: %w", id, err)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("pgstore: get job %s: %w", id, store.ErrNotFound)
	}
	return jobs[0], nil
}

// jobColumns are the columns scanJob reads, in order.
const jobColumns = `id, kind, payload, metadata, state, priority, run_at, scheduled_at, attempt,
	max_attempts, unique_key, errors, lease_token, lease_expires_at, owner, cancel_requested,
	pause_requested, fence, created_at, attempted_at, finished_at, unique_global, unique_finished, unique_period,
	partition_key, sequence_key, snoozes, snoozed_at, ` + followUpColumns

// unreadColumns are the columns of jobs that no read scans (jobColumns
// leaves them out), each kept for the store's own statements: every other
// column of jobs is in jobColumns. TestHistoryCarriesEveryColumn checks
// the catalog against both lists, so a column a migration adds fails it
// until it is read or listed here with its reason.
var unreadColumns = map[string]string{
	"unique_window":   "the insert's window of unique_period: part of jobs_unique_scope_idx, read by the key's lookups",
	"pending_counted": "whether the flows row's pending count includes the job (flowqueries.go)",
	"unkeyed":         "a job of a kind with a partition source and no key: jobs_unkeyed_idx, read by the flow claim (unkeyed.go)",
}

// prefixed returns jobColumns qualified by alias.
func prefixed(alias string) string {
	cols := strings.Split(jobColumns, ",")
	for i, c := range cols {
		cols[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

type attemptErrorJSON struct {
	Attempt   int       `json:"attempt"`
	At        time.Time `json:"at"`
	Error     string    `json:"error"`
	Node      string    `json:"node"`
	StartedAt time.Time `json:"started_at"`
}

// jobScan holds the nullable columns of one row while scanning.
type jobScan struct {
	j          store.JobRecord
	state      string
	uniqueKey  *string
	payload    []byte // raw bytes: pgx decodes into a json.RawMessage through encoding/json, which trims
	errors     []byte
	leaseToken pgtype.UUID // not *uuid.UUID: pgx scans a uuid.UUID through its sql.Scanner, as text
	leaseExp   *time.Time
	attempted  *time.Time
	finished   *time.Time
	uGlobal    bool
	uFinished  bool
	uPeriod    int32 // seconds
	sequence   *string
	snoozedAt  *time.Time
	x          jobExtra // followUpColumns
}

func (js *jobScan) dest() []any {
	j := &js.j
	// The ID as *[16]byte: pgx then copies the binary value, where a
	// *uuid.UUID goes through its sql.Scanner, formatted and parsed as text.
	return append([]any{(*[16]byte)(&j.ID), &j.Kind, &js.payload, &j.Metadata, &js.state, &j.Priority, &j.RunAt,
		&j.ScheduledAt, &j.Attempt, &j.MaxAttempts, &js.uniqueKey, &js.errors, &js.leaseToken,
		&js.leaseExp, &j.Owner, &j.CancelRequested, &j.PauseRequested, &j.Fence, &j.CreatedAt,
		&js.attempted, &js.finished, &js.uGlobal, &js.uFinished, &js.uPeriod, &j.PartitionKey, &js.sequence, &j.Snoozes, &js.snoozedAt}, js.x.dest()...)
}

func (js *jobScan) record() (*store.JobRecord, error) {
	j := js.j
	j.Payload = js.payload
	j.State = store.State(js.state)
	if js.uniqueKey != nil {
		j.UniqueKey = *js.uniqueKey
		j.Unique = store.UniqueScope{Global: js.uGlobal, Finished: js.uFinished, Period: time.Duration(js.uPeriod) * time.Second}
	}
	if js.leaseToken.Valid && j.State == store.StateRunning {
		// A finish keeps the token of the lease that wrote it (see the
		// extend statement); the record shows it while running only.
		j.LeaseToken = js.leaseToken.Bytes
	}
	if js.leaseExp != nil {
		j.LeaseExpiresAt = *js.leaseExp
	}
	if js.attempted != nil {
		j.AttemptedAt = *js.attempted
	}
	if js.finished != nil {
		j.FinishedAt = *js.finished
	}
	if js.sequence != nil {
		j.SequenceKey = *js.sequence
	}
	if js.snoozedAt != nil {
		j.SnoozedAt = *js.snoozedAt
	}
	if len(j.Metadata) == 0 {
		j.Metadata = nil
	}
	if err := js.x.apply(&j); err != nil {
		return nil, err
	}
	if len(js.errors) > 0 {
		var errs []attemptErrorJSON
		if err := json.Unmarshal(js.errors, &errs); err != nil {
			return nil, fmt.Errorf("decode errors of job %s: %w", j.ID, err)
		}
		for _, e := range errs {
			j.Errors = append(j.Errors, store.AttemptError{Attempt: e.Attempt, At: e.At, Error: e.Error, Node: e.Node, StartedAt: e.StartedAt})
		}
	}
	return &j, nil
}

// collectJobs scans rows of jobColumns (possibly followed by ignored
// columns) and closes rows.
func collectJobs(rows pgx.Rows) ([]*store.JobRecord, error) {
	defer rows.Close()
	var jobs []*store.JobRecord
	for rows.Next() {
		var js jobScan
		dest := js.dest()
		for len(dest) < len(rows.FieldDescriptions()) {
			dest = append(dest, nil)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		j, err := js.record()
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// micros converts d to whole microseconds, PostgreSQL's resolution.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }
