package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/axsched/ax/store"
)

// Compile-time checks of the interfaces Store implements.
var (
	_ store.Store              = (*Store)(nil)
	_ store.Notifier           = (*Store)(nil)
	_ store.Pruner             = (*Store)(nil)
	_ store.Lister             = (*Store)(nil)
	_ store.Counter            = (*Store)(nil)
	_ store.Closer             = (*Store)(nil)
	_ store.PeriodicStore      = (*Store)(nil)
	_ store.Leaser             = (*Store)(nil)
	_ store.NodeRegistry       = (*Store)(nil)
	_ store.JobInspector       = (*Store)(nil)
	_ store.BulkController     = (*Store)(nil)
	_ store.KindPauser         = (*Store)(nil)
	_ store.PeriodicController = (*Store)(nil)
	_ store.LeaderReader       = (*Store)(nil)
	_ store.DueInspector       = (*Store)(nil)
	_ store.FollowUpStore      = (*Store)(nil)
	_ store.BatchStore         = (*Store)(nil)
	_ store.NonceKeeper        = (*Store)(nil)
	_ store.RevocationKeeper   = (*Store)(nil)
	_ store.FlowStore          = (*Store)(nil)
)

// ErrLocked means another Store (in this process or another one) has the
// database file open: a file serves one Store at a time. See the package
// documentation.
var ErrLocked = errors.New("ax/sqlitestore: database file in use")

// ErrReadOnly is returned by every write of a Store opened with
// OpenReadOnly.
var ErrReadOnly = errors.New("ax/sqlitestore: store opened read-only (the process holding the file makes changes)")

// ErrSchemaTooNew means the file was migrated by a newer version of this
// package; Open changes nothing then.
var ErrSchemaTooNew = errors.New("ax/sqlitestore: database schema is newer than this package")

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on one SQLite database file. It also implements
// store.Notifier (in-process), store.Pruner, store.Lister, store.Counter,
// store.Closer, the periodic and cluster interfaces (store.PeriodicStore,
// store.Leaser, store.NodeRegistry), the operator's (store.JobInspector,
// store.BulkController, store.KindPauser, store.PeriodicController,
// store.LeaderReader, store.DueInspector), store.FollowUpStore,
// store.BatchStore, store.NonceKeeper, store.RevocationKeeper,
// store.KindDefaulter and store.FlowStore, and adds InsertTx and
// CompleteTx to insert and finish jobs inside a transaction of the
// caller's.
//
// All methods are safe for concurrent use; each is one transaction, so it
// either fully applies or changes nothing. Records it returns are fresh
// copies. A method called with a context that is already done returns the
// context's error and changes nothing. After Close every method returns an
// error wrapping store.ErrClosed.
//
// Open a Store with Open; the zero value is not usable.
type Store struct {
	path string
	cfg  config
	lock *os.File // the flock held while open; nil where unsupported

	w  *sql.DB // the writer: one connection, BEGIN IMMEDIATE
	r  *sql.DB // readers: query_only connections
	ws stmts   // statements prepared on w
	rs stmts   // statements prepared on r

	lastNow atomic.Int64 // latest default-clock reading, µs: the clock never goes back

	subs subscribers

	closeMu sync.Mutex
	closed  atomic.Bool
}

// Open opens (creating it if missing) the SQLite database file at path,
// migrates it to this package's schema and returns a Store on it. It takes
// an exclusive lock on path+".lock" for the Store's life (path with its
// symbolic links resolved): a second Open of the same file, by this
// process or another, fails with an error wrapping ErrLocked until Close
// (or the death of the holder, however it dies). A hard link to the file
// is another path, with another lock: do not open a file through two.
//
// Jobs left running in the file were run by a process that is gone (the
// lock proves it): Open makes their leases expire at once, so the first
// RescueExpired takes them back (retrying, or dead when their attempts are
// used up) rather than waiting out their leases.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("open sqlite store: %w: want the path of a file (without '?'), got %q", store.ErrInvalidParams, path)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	abs, err := canonical(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	s := &Store{path: abs, cfg: cfg}
	if s.lock, err = lockFile(abs + ".lock"); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	if err := s.open(ctx); err != nil {
		_ = s.release() // the open error says more
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return s, nil
}

// OpenReadOnly opens the existing SQLite database file at path for
// reading only, beside the process that holds it (Open's lock): it takes
// no lock, migrates nothing and expires no lease, and every write fails
// with an error wrapping ErrReadOnly. Reads see the holder's committed
// writes (WAL mode lets readers of other processes in). It is how an
// operator's tool (the ax command) lists jobs, kinds, nodes and flows of
// a file a running service holds. The file must be at this package's
// schema version.
func OpenReadOnly(ctx context.Context, path string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("open sqlite store read-only: %w: want the path of a file (without '?'), got %q", store.ErrInvalidParams, path)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open sqlite store %s read-only: %w", path, err)
	}
	abs, err := canonical(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s read-only: %w", path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("open sqlite store %s read-only: %w", path, err)
	}
	s := &Store{path: abs, cfg: cfg}
	if err := s.openReaders(ctx); err != nil {
		_ = s.release()
		return nil, fmt.Errorf("open sqlite store %s read-only: %w", path, err)
	}
	var version int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		_ = s.release()
		return nil, fmt.Errorf("open sqlite store %s read-only: read schema version: %w", path, err)
	}
	if want := migrationCount(); version != want {
		_ = s.release()
		if version > want {
			return nil, fmt.Errorf("open sqlite store %s read-only: %w: version %d, this package knows %d", path, ErrSchemaTooNew, version, want)
		}
		return nil, fmt.Errorf("open sqlite store %s read-only: schema at version %d, this package at %d (Open migrates it)", path, version, want)
	}
	if err := s.rs.prepare(ctx, s.r, readerQueries); err != nil {
		_ = s.release()
		return nil, fmt.Errorf("open sqlite store %s read-only: prepare: %w", path, err)
	}
	return s, nil
}

// migrationCount returns the schema version of this package.
func migrationCount() int {
	names, _ := fs.Glob(migrations, "migrations/*.sql")
	return len(names)
}

// canonical returns path absolute, with the symbolic links of its
// directory (and of the file, when it exists) resolved, so that two paths
// to one file take one lock.
func canonical(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if p, err := filepath.EvalSymlinks(abs); err == nil {
		return p, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// open opens the two pools, migrates, expires stale leases and prepares
// the statements.
func (s *Store) open(ctx context.Context) error {
	syncMode := "FULL"
	if s.cfg.syncNormal {
		syncMode = "NORMAL"
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(s.cfg.busyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+syncMode+")")
	q.Add("_pragma", "foreign_keys(0)")
	q.Set("_txlock", "immediate")
	var err error
	if s.w, err = sql.Open("sqlite", s.path+"?"+q.Encode()); err != nil {
		return err
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if err := s.expireStaleLeases(ctx); err != nil {
		return err
	}

	if err := s.openReaders(ctx); err != nil {
		return err
	}
	if err := s.ws.prepare(ctx, s.w, writerQueries); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := s.rs.prepare(ctx, s.r, readerQueries); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

// openReaders opens the pool of read-only connections.
func (s *Store) openReaders(ctx context.Context) error {
	rq := url.Values{}
	rq.Add("_pragma", "busy_timeout("+strconv.FormatInt(s.cfg.busyTimeout.Milliseconds(), 10)+")")
	rq.Add("_pragma", "query_only(1)")
	var err error
	if s.r, err = sql.Open("sqlite", s.path+"?"+rq.Encode()); err != nil {
		return err
	}
	s.r.SetMaxOpenConns(s.cfg.readers)
	s.r.SetMaxIdleConns(s.cfg.readers)
	return s.r.PingContext(ctx)
}

// migrate applies the embedded migrations the file lacks, in one
// transaction, recording the version in PRAGMA user_version.
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if version > len(names) {
		return fmt.Errorf("%w: version %d, this package knows %d", ErrSchemaTooNew, version, len(names))
	}
	for i := version; i < len(names); i++ {
		body, err := migrations.ReadFile(names[i])
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("migrate %s: %w", names[i], err)
		}
		if _, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("migrate %s: %w", names[i], err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// expireStaleLeases makes the leases of jobs left running by a dead
// process expire now; see Open.
func (s *Store) expireStaleLeases(ctx context.Context) error {
	now := toUS(s.clock())
	_, err := s.w.ExecContext(ctx, `UPDATE jobs SET lease_expires_at = ? WHERE state = 'running' AND lease_expires_at >= ?`, now-1, now)
	if err != nil {
		return fmt.Errorf("expire leases of a previous process: %w", err)
	}
	return nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// DB returns the Store's writer handle, a *sql.DB of one connection whose
// transactions begin with BEGIN IMMEDIATE. Begin on it the transactions
// that must commit together with jobs (see InsertTx): they then share the
// file's single writer with the Store, so they neither wait on a busy
// timeout nor make the Store's own writes fail. While such a transaction
// is open, the Store's other writes (claims, heartbeats, outcomes) wait for
// it: keep it short, and never call the Store's methods (other than
// InsertTx with that transaction) before it ends, or they wait for the
// connection it holds. Do not close it; Close does.
func (s *Store) DB() *sql.DB { return s.w }

// Close closes the database and releases the file's lock. Later calls to
// other methods return errors wrapping store.ErrClosed; subscriptions are
// dropped. Close is safe to call more than once; only the first call's
// error is returned.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	s.subs.clear()
	return s.release()
}

// release closes what open opened and drops the lock.
func (s *Store) release() error {
	var errs []error
	s.ws.close()
	s.rs.close()
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}

// Now returns the store's clock: the host's clock (time.Now, unless
// WithClock replaced it) truncated to the microsecond. The default clock
// never goes back within a Store: a reading earlier than the previous one
// (the host's clock was set back) returns the previous one.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := s.usable(ctx); err != nil {
		return time.Time{}, fmt.Errorf("read store clock: %w", err)
	}
	return s.clock(), nil
}

// clock reads the store's clock at microsecond precision, in UTC.
func (s *Store) clock() time.Time {
	if s.cfg.now != nil {
		return fromUS(s.cfg.now().UnixMicro())
	}
	now := time.Now().UnixMicro()
	for {
		last := s.lastNow.Load()
		if now <= last {
			return fromUS(last)
		}
		if s.lastNow.CompareAndSwap(last, now) {
			return fromUS(now)
		}
	}
}

// usable reports why the Store cannot start a call: closed, or ctx done.
func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// dbErr maps a database error: after Close, to store.ErrClosed; a
// constraint the data broke or a value SQLite refuses, to
// store.ErrInvalidParams (never worth retrying as is).
func (s *Store) dbErr(err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() && !errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("%w: %w", store.ErrClosed, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_RANGE:
			return fmt.Errorf("%w: %w", store.ErrInvalidParams, err)
		}
	}
	return err
}

// isConstraint reports whether err is a broken constraint (a unique key
// taken, for a job reopened by RunNow).
func isConstraint(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// write runs fn in one BEGIN IMMEDIATE transaction on the writer
// connection, with the store's clock read once the write lock is held, and
// delivers the notifications fn collected once the transaction committed.
func (s *Store) write(ctx context.Context, fn func(w *wtx) error) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if s.w == nil {
		return ErrReadOnly
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.dbErr(err)
	}
	// Statements run without ctx's cancellation: the driver would start a
	// goroutine per statement to watch it. ctx still bounds the wait for
	// the connection, and its cancellation rolls the transaction back.
	w := &wtx{s: s, ctx: context.WithoutCancel(ctx), tx: tx, own: true, now: s.clock()}
	if err := fn(w); err != nil {
		_ = tx.Rollback()
		return s.dbErr(err)
	}
	if err := tx.Commit(); err != nil {
		return s.dbErr(err)
	}
	s.subs.deliver(w.notes.list)
	return nil
}

// maxReadTime bounds every read: a listing with a filter the indexes do
// not serve ends with an error rather than keeping a snapshot open (which
// holds back WAL checkpoints) for long.
const maxReadTime = 30 * time.Second

// read runs fn on a reader connection, in one read transaction when tx,
// so that its statements see one snapshot, for at most maxReadTime.
func (s *Store) read(ctx context.Context, tx bool, fn func(r *rtx) error) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, maxReadTime)
	defer cancel()
	r := &rtx{s: s, ctx: ctx}
	if tx {
		t, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return s.dbErr(err)
		}
		defer t.Rollback() //nolint:errcheck // read-only
		r.tx = t
	}
	return s.dbErr(fn(r))
}

// wtx is one write transaction: the statements it runs, its clock reading
// and the notifications to deliver after it commits.
type wtx struct {
	s   *Store
	ctx context.Context
	tx  *sql.Tx
	// own is false for a caller's transaction (InsertTx), on which the
	// Store's prepared statements may not run.
	own   bool
	now   time.Time
	notes notes
	bound map[query]*sql.Stmt
	// flows caches the flow settings read (nil: the kind has none).
	flows map[string]*flowRow
	// pbreakers caches the partition breakers read and changed
	// (partitionbreaker.go).
	pbreakers map[partKey]*partBreakerRow
}

// stmt returns q bound to the transaction (prepared once per store).
func (w *wtx) stmt(q query) *sql.Stmt {
	if st := w.bound[q]; st != nil {
		return st
	}
	if w.bound == nil {
		w.bound = make(map[query]*sql.Stmt)
	}
	st := w.tx.StmtContext(w.ctx, w.s.ws[q])
	w.bound[q] = st
	return st
}

func (w *wtx) exec(q query, args ...any) (sql.Result, error) {
	if !w.own {
		return w.tx.ExecContext(w.ctx, queryText[q], args...)
	}
	return w.stmt(q).ExecContext(w.ctx, args...)
}

func (w *wtx) query(q query, args ...any) (*sql.Rows, error) {
	if !w.own {
		return w.tx.QueryContext(w.ctx, queryText[q], args...)
	}
	return w.stmt(q).QueryContext(w.ctx, args...)
}

func (w *wtx) queryRow(q query, args ...any) *sql.Row {
	if !w.own {
		return w.tx.QueryRowContext(w.ctx, queryText[q], args...)
	}
	return w.stmt(q).QueryRowContext(w.ctx, args...)
}

// notify records that a job of kind became claimable at runAt, for the
// subscribers, when there are any.
func (w *wtx) notify(kind string, runAt time.Time) {
	if w.s.subs.any() {
		w.notes.add(kind, runAt)
	}
}

// rtx runs reads, in a read transaction or not.
type rtx struct {
	s   *Store
	ctx context.Context
	tx  *sql.Tx
}

func (r *rtx) query(q query, args ...any) (*sql.Rows, error) {
	if r.tx != nil {
		return r.tx.StmtContext(r.ctx, r.s.rs[q]).QueryContext(r.ctx, args...)
	}
	return r.s.rs[q].QueryContext(r.ctx, args...)
}

func (r *rtx) queryRow(q query, args ...any) *sql.Row {
	if r.tx != nil {
		return r.tx.StmtContext(r.ctx, r.s.rs[q]).QueryRowContext(r.ctx, args...)
	}
	return r.s.rs[q].QueryRowContext(r.ctx, args...)
}

// queryText runs a statement built at run time (filters).
func (r *rtx) queryText(text string, args ...any) (*sql.Rows, error) {
	if r.tx != nil {
		return r.tx.QueryContext(r.ctx, text, args...)
	}
	return r.s.r.QueryContext(r.ctx, text, args...)
}

// Conversions between Go values and columns.

// toUS returns t in microseconds since the Unix epoch.
func toUS(t time.Time) int64 { return t.UnixMicro() }

// fromUS returns the UTC time of v microseconds since the Unix epoch.
func fromUS(v int64) time.Time { return time.UnixMicro(v).UTC() }

// nullUS returns t's microseconds, or NULL for the zero time.
func nullUS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// fromNullUS returns the time of a nullable column, zero for NULL.
func fromNullUS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromUS(v.Int64)
}

// idArg returns id as a BLOB argument, NULL for the zero UUID.
func idArg(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id[:]
}

// idFrom returns the UUID of a BLOB column (zero for NULL).
func idFrom(b []byte) (uuid.UUID, error) {
	if b == nil {
		return uuid.Nil, nil
	}
	return uuid.FromBytes(b)
}

// nullText returns s, or NULL when empty.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// boolInt returns 1 for true, 0 for false.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// SchemaVersion returns the schema version this package migrates files
// to (the number of its migrations).
func SchemaVersion() int { return migrationCount() }

// FileSchemaVersion returns the schema version of the existing database
// file at path (0 for a file no Store migrated), read without a lock and
// without changing the file, so that a tool can compare it with
// SchemaVersion beside a process that holds the file.
func FileSchemaVersion(ctx context.Context, path string) (int, error) {
	s := &Store{path: path, cfg: defaultConfig()}
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", path, err)
	}
	if err := s.openReaders(ctx); err != nil {
		_ = s.release()
		return 0, fmt.Errorf("read schema version of %s: %w", path, err)
	}
	defer s.release() //nolint:errcheck // read-only
	var version int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", path, err)
	}
	return version, nil
}
