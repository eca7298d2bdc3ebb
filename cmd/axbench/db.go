package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// noopKind is the kind of the benchmarks' jobs.
const noopKind = "bench.noop"

// benchDB is a scenario's own database, with a pgstore on it.
type benchDB struct {
	name   string
	dsn    string
	server string
	pool   *pgxpool.Pool
	store  *pgstore.Store
	jobs   string // the jobs table, quoted and schema-qualified
	// noDirect: Config.DisableDirectStart for every Scheduler (-no-direct-start).
	noDirect bool
	// ride: Config.OutcomesWithClaims for every Scheduler (-outcomes-with-claims).
	ride bool
	// asyncCommits: pgstore.WithAsyncClaimsAndOutcomes for every store (-async-commits).
	asyncCommits bool
	// earlyStart: pgstore.WithEarlyDirectStart for every store (-early-start).
	earlyStart bool
	// via is the PgBouncer the scenario's stores go through (pooler.go).
	via     string
	viaPool *pgxpool.Pool
}

// createDB creates a fresh database on the server, migrated by pgstore.New.
// Call close to drop it.
func (b *bench) createDB(ctx context.Context) (*benchDB, error) {
	d := &benchDB{name: "axbench_" + randomHex(6), server: b.opt.db, noDirect: b.opt.noDirect, ride: b.opt.ride, asyncCommits: b.opt.asyncCommits,
		earlyStart: b.opt.earlyStart}
	conn, err := pgx.Connect(ctx, b.opt.db)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(b.opt.db), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{d.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", d.name, err)
	}
	d.dsn, err = withDatabase(b.opt.db, d.name)
	if err == nil {
		d.pool, err = newPool(ctx, d.dsn, b.opt.conns, "axbench")
	}
	if err == nil {
		d.store, err = pgstore.New(ctx, d.pool)
	}
	if err == nil && b.via != "" {
		err = d.usePooler(ctx, b.via, b.opt.conns)
	}
	if err != nil {
		d.close()
		return nil, err
	}
	d.jobs = pgx.Identifier{d.store.Schema(), "jobs"}.Sanitize()
	return d, nil
}

// newPool opens a pool of at most conns connections (0: pgxpool's
// default) named app in pg_stat_activity, with what edit changes.
func newPool(ctx context.Context, dsn string, conns int, app string, edit ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if conns > 0 {
		cfg.MaxConns = int32(conns)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	for _, e := range edit {
		e(cfg)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// session is a pool and a pgstore of its own on a scenario's database, for
// a run whose server-side cost is measured: closing it ends its backends,
// which makes them report their statistics (see settle).
type session struct {
	pool  *pgxpool.Pool
	store *pgstore.Store
}

// openSession opens a session whose connections are named app, its pool
// configured with what edit changes.
func (d *benchDB) openSession(ctx context.Context, conns int, app string, edit ...func(*pgxpool.Config)) (*session, error) {
	pool, err := d.sessionPool(ctx, conns, app, edit...)
	if err != nil {
		return nil, err
	}
	st, err := pgstore.New(ctx, pool, d.storeOptions()...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &session{pool: pool, store: st}, nil
}

// close closes the store (its listener) and the pool. Safe to call twice.
func (s *session) close() {
	if s == nil {
		return
	}
	_ = s.store.Close()
	s.pool.Close()
}

// newScheduler returns a Scheduler on st with the default Config but for
// Workers (0: the default).
func newScheduler(st store.Store, workers int) (*ax.Scheduler, error) {
	return ax.New(ax.Config{Store: st, Workers: workers})
}

// close closes the store and pool and drops the database, even when the
// scenario's context is cancelled.
func (d *benchDB) close() {
	if d.store != nil {
		_ = d.store.Close()
	}
	if d.pool != nil {
		d.pool.Close()
	}
	if d.viaPool != nil {
		d.viaPool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.server)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)")
}

// scheduler returns a Scheduler on the database with the default Config
// but for Workers (0: the default) and what edit changes.
func (d *benchDB) scheduler(workers int, edit ...func(*ax.Config)) (*ax.Scheduler, error) {
	return d.schedulerOn(d.store, workers, edit...)
}

// schedulerOn is scheduler on st (a session's store, or a wrapper of it).
func (d *benchDB) schedulerOn(st store.Store, workers int, edit ...func(*ax.Config)) (*ax.Scheduler, error) {
	cfg := ax.Config{Store: st, Workers: workers, DisableDirectStart: d.noDirect, OutcomesWithClaims: d.ride}
	for _, e := range edit {
		e(&cfg)
	}
	return ax.New(cfg)
}

// exec runs SQL with the names of sub substituted.
func (d *benchDB) exec(ctx context.Context, sql string, args ...any) error {
	_, err := d.pool.Exec(ctx, d.sub(sql), args...)
	return err
}

// count runs a query returning one integer.
func (d *benchDB) count(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, d.sub(sql), args...).Scan(&n)
	return n, err
}

// sub returns sql with {jobs} standing for the jobs table, {history} for
// the finished jobs' history (pgstore migration 0008) and {alljobs} for
// the view over both.
func (d *benchDB) sub(sql string) string {
	schema := d.store.Schema()
	return strings.NewReplacer("{jobs}", d.jobs, "{history}", pgx.Identifier{schema, "jobs_history"}.Sanitize(),
		"{alljobs}", pgx.Identifier{schema, "jobs_all"}.Sanitize()).Replace(sql)
}

// truncate empties the jobs table and the history.
func (d *benchDB) truncate(ctx context.Context) error {
	return d.exec(ctx, "TRUNCATE {jobs}, {history}")
}

// scheduleNoops inserts n immediate no-op jobs through ScheduleMany in
// batches of batch (COPY), and returns the time it took.
func scheduleNoops(ctx context.Context, s *ax.Scheduler, n, batch int, opts ...ax.ScheduleOption) (time.Duration, error) {
	reqs := make([]ax.Request, min(n, batch))
	for i := range reqs {
		reqs[i] = ax.Request{Kind: noopKind, Options: opts}
	}
	start := time.Now()
	for done := 0; done < n; {
		k := min(batch, n-done)
		if _, err := s.ScheduleMany(ctx, reqs[:k]); err != nil {
			return 0, err
		}
		done += k
	}
	return time.Since(start), nil
}

// counter counts handler calls and signals when a target is reached.
type counter struct {
	n      atomic.Int64
	target int64
	done   chan struct{}
	doneAt time.Time // set before done is closed
}

func newCounter(target int) *counter {
	return &counter{target: int64(target), done: make(chan struct{})}
}

func (c *counter) inc() {
	if c.n.Add(1) == c.target {
		c.doneAt = time.Now()
		close(c.done)
	}
}

// wait waits for c to reach its target, printing progress every 2 s, for
// at most timeout.
func (b *bench) wait(ctx context.Context, what string, c *counter, timeout time.Duration) error {
	return b.waitFor(ctx, what, c.done, func() int64 { return c.n.Load() }, c.target, timeout)
}

func (b *bench) waitFor(ctx context.Context, what string, done <-chan struct{}, n func() int64, target int64, timeout time.Duration) error {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	start := time.Now()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s: only %d of %d after %s", what, n(), target, timeout)
		case <-tick.C:
			b.progressf("%s: %d/%d (%.0fs)", what, n(), target, time.Since(start).Seconds())
		}
	}
}

// waitCount waits until n() reaches target, for at most timeout.
func (b *bench) waitCount(ctx context.Context, what string, n func() int64, target int64, timeout time.Duration) error {
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for n() < target {
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	return b.waitFor(ctx, what, done, n, target, timeout)
}

// stopScheduler stops s, allowing 2 minutes to drain.
func stopScheduler(s *ax.Scheduler) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return s.Stop(ctx)
}

func withDatabase(serverURL, db string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme == "" {
		return serverURL + " dbname=" + db, nil // keyword/value form
	}
	u.Path = "/" + db
	return u.String(), nil
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "the -db server"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
