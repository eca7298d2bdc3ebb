// Command worker is the host process of the fault-injection suite
// (package faulttest): one AX Scheduler on PostgreSQL that runs jobs of
// kind "work" and records every execution in the test's executions table.
// The suite builds it, starts several, and kills, pauses, cuts off and
// skews them.
//
// Stdout carries one line per fact the suite waits for:
//
//	READY <node>                  the Scheduler started
//	EVENT leader <true|false>     this host gained or lost the maintenance leadership
//	EVENT lease_lost <job id>     a lease was lost (handler cancelled, or its result refused)
//	EVENT handed_back <job id>    Stop handed the job back to the store (its handler had not returned)
//	EVENT breaker <state> <time>  this host moved the breaker of "work" to open, half_open or closed (host time, RFC 3339)
//	EVENT succeeded <job> <attempt> the job's success was written (with -say-finished)
//	EVENT key_missing <job id> <key> this host could not open the job's sealed payload and left it for another (with -keys)
//	SCHEDULED <job id>            this host's Schedule returned the job (with -schedule-rate)
//	ERROR <error>                 this host's Schedule failed (with -schedule-rate)
//	SCHEDULE_DONE <ok> <failed>   this host scheduled for -schedule-for
//	STOPPED <error or nil>        Stop returned after SIGTERM
//
// With -ledger, executions are recorded in that database instead of the
// jobs' one, so that a scenario that fails the jobs' database over keeps
// a record of what ran that the failover cannot lose (internal/deploytest).
//
// With -schedule-rate the host also schedules "work" jobs itself, due at
// once, so that they start directly on it (with -early-start, during
// their insert's flush: pgstore.WithEarlyDirectStart).
//
// Flow flags (-global-concurrency, -rate, -breaker-failures, ...) give the
// "work" kind the matching handler options; with -downstream, its handler
// fails while the test's downstream table says the downstream is down.
//
// With -keys, jobs are encrypted at rest with the key ring in that file
// (ax.LoadKeyRing): a rolling rotation restarts the hosts one at a time
// with a new file (internal/faulttest, rotation_test.go).
//
// Logs (zap, JSON) go to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// workPayload is the payload of "work" jobs.
type workPayload struct {
	// MS is how long the handler works, in milliseconds.
	MS int `json:"ms"`
}

func main() {
	var (
		dsn          = flag.String("dsn", "", "PostgreSQL connection string (required)")
		node         = flag.String("node", "", "node name")
		workers      = flag.Int("workers", 50, "Config.Workers")
		lease        = flag.Duration("lease", 0, "Config.LeaseDuration (0: default)")
		leaderTTL    = flag.Duration("leader-ttl", 0, "Config.LeaderTTL (0: default)")
		rescue       = flag.Duration("rescue", 0, "Config.RescueInterval (0: default)")
		poll         = flag.Duration("poll", 0, "Config.PollInterval (0: default)")
		clockOffset  = flag.Duration("clock-offset", 0, "host clock offset (Config.Clock = time.Now + offset)")
		stopTimeout  = flag.Duration("stop-timeout", 10*time.Second, "Stop's deadline on SIGTERM")
		maxConns     = flag.Int("max-conns", 6, "pool size")
		periodicName = flag.String("periodic-name", "", "declare a periodic schedule of this name (kind)")
		periodicSpec = flag.String("periodic-spec", "@every 1s", "its spec")
		global       = flag.Int("global-concurrency", 0, "ax.GlobalConcurrency of work (0: none)")
		rate         = flag.Int("rate", 0, "ax.RateLimit of work: starts per -rate-per (0: none)")
		ratePer      = flag.Duration("rate-per", time.Second, "the rate limit's window")
		brFailures   = flag.Int("breaker-failures", 0, "ax.CircuitBreaker of work: failures in a row (0: no breaker)")
		brCoolDown   = flag.Duration("breaker-cooldown", time.Second, "the breaker's cool-down")
		brMax        = flag.Duration("breaker-max-cooldown", 4*time.Second, "the breaker's longest cool-down")
		downstream   = flag.Bool("downstream", false, "fail work jobs while the downstream table says down")
		retryBase    = flag.Duration("retry-base", 0, "ExponentialBackoff.Base of work (0: default)")
		txhold       = flag.Bool("txhold", false, "register txhold (txhold.go)")
		ledger       = flag.String("ledger", "", "record executions in this database (default: -dsn's)")
		sayFinished  = flag.Bool("say-finished", false, "print EVENT succeeded lines")
		asyncCommits = flag.Bool("async-commits", false, "pgstore.WithAsyncClaimsAndOutcomes")
		earlyStart   = flag.Bool("early-start", false, "pgstore.WithEarlyDirectStart")
		schedRate    = flag.Int("schedule-rate", 0, "schedule this many work jobs a second, due at once, from this host (0: none)")
		schedFor     = flag.Duration("schedule-for", 15*time.Second, "how long -schedule-rate schedules")
		schedMS      = flag.Int("schedule-ms", 300, "the work of each job -schedule-rate schedules, in milliseconds")
		keys         = flag.String("keys", "", "key ring file (Config.Keys; empty: no encryption)")
		keyMissing   = flag.Duration("key-missing-delay", 0, "Config.KeyMissingDelay (0: default)")
		noDirect     = flag.Bool("no-direct-start", false, "Config.DisableDirectStart")
		citus        = flag.String("citus", "", "open this distributed schema of the Citus coordinator -dsn names with pgstore.NewCitus")
	)
	flag.Parse()
	if err := run(config{
		dsn: *dsn, node: *node, workers: *workers, lease: *lease, leaderTTL: *leaderTTL,
		rescue: *rescue, poll: *poll, clockOffset: *clockOffset, stopTimeout: *stopTimeout,
		maxConns: *maxConns, periodicName: *periodicName, periodicSpec: *periodicSpec,
		global: *global, rate: *rate, ratePer: *ratePer, brFailures: *brFailures, brCoolDown: *brCoolDown,
		brMax: *brMax, downstream: *downstream, retryBase: *retryBase, txhold: *txhold,
		ledger: *ledger, sayFinished: *sayFinished, asyncCommits: *asyncCommits, earlyStart: *earlyStart,
		schedRate: *schedRate, schedFor: *schedFor, schedMS: *schedMS,
		keys: *keys, keyMissing: *keyMissing, noDirect: *noDirect, citus: *citus,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

type config struct {
	dsn, node                      string
	workers, maxConns              int
	lease, leaderTTL, rescue, poll time.Duration
	clockOffset, stopTimeout       time.Duration
	periodicName, periodicSpec     string
	global, rate, brFailures       int
	ratePer, brCoolDown, brMax     time.Duration
	downstream                     bool
	retryBase                      time.Duration
	txhold                         bool
	ledger                         string
	sayFinished                    bool
	asyncCommits                   bool // pgstore.WithAsyncClaimsAndOutcomes
	earlyStart                     bool // pgstore.WithEarlyDirectStart
	schedRate, schedMS             int
	schedFor                       time.Duration
	keys                           string // key ring file
	keyMissing                     time.Duration
	noDirect                       bool
	citus                          string // a distributed schema: pgstore.NewCitus
}

// workOptions returns the handler options of "work" the flags ask for.
func (c config) workOptions() []ax.HandlerOption {
	opts := []ax.HandlerOption{ax.Timeout(time.Hour)}
	if c.global > 0 {
		opts = append(opts, ax.GlobalConcurrency(c.global))
	}
	if c.rate > 0 {
		opts = append(opts, ax.RateLimit(c.rate, c.ratePer))
	}
	if c.brFailures > 0 {
		opts = append(opts, ax.CircuitBreaker(ax.BreakerConfig{Failures: c.brFailures, CoolDown: c.brCoolDown, MaxCoolDown: c.brMax}))
	}
	if c.retryBase > 0 {
		opts = append(opts, ax.Retry(ax.ExponentialBackoff{Base: c.retryBase, Max: 4 * c.retryBase}))
	}
	return opts
}

// jobStore is what the worker needs of either PostgreSQL store.
type jobStore interface {
	store.Store
	Close() error
}

// openStore opens pgstore, or the Citus store on the schema -citus
// names.
func openStore(ctx context.Context, pool *pgxpool.Pool, c config, opts []pgstore.Option) (jobStore, error) {
	if c.citus != "" {
		return pgstore.NewCitus(ctx, pool, pgstore.WithSchema(c.citus))
	}
	st, err := pgstore.New(ctx, pool, opts...)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// out serializes stdout lines.
var outMu sync.Mutex

func say(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

func run(c config) error {
	if c.dsn == "" {
		return errors.New("-dsn is required")
	}
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck

	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(c.maxConns)
	// The store's pool refuses uuid.UUID values, as every test pool does
	// (pgtest.StrictUUIDs): the store's paths that only running hosts
	// reach (leadership, rescue, periodic ticks, the Citus store's) are
	// guarded too. The ledger's statements below send IDs as [16]byte.
	pgtest.StrictUUIDs(pcfg)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	storeOpts := []pgstore.Option{pgstore.WithoutMigrate()}
	if c.asyncCommits {
		storeOpts = append(storeOpts, pgstore.WithAsyncClaimsAndOutcomes())
	}
	if c.earlyStart {
		storeOpts = append(storeOpts, pgstore.WithEarlyDirectStart())
	}
	st, err := openStore(ctx, pool, c, storeOpts)
	if err != nil {
		return err
	}
	defer st.Close()

	cfg := ax.Config{
		Store: st, Logger: log, Node: c.node, Workers: c.workers,
		LeaseDuration: c.lease, LeaderTTL: c.leaderTTL, RescueInterval: c.rescue, PollInterval: c.poll,
		Observers:       []ax.Observer{ax.ObserverFunc(func(e ax.Event) { observe(e, c.sayFinished) })},
		KeyMissingDelay: c.keyMissing, DisableDirectStart: c.noDirect,
	}
	if c.keys != "" {
		if cfg.Keys, err = ax.LoadKeyRing(c.keys); err != nil {
			return err
		}
	}
	if c.clockOffset != 0 {
		off := c.clockOffset
		cfg.Clock = func() time.Time { return time.Now().Add(off) }
	}
	s, err := ax.New(cfg)
	if err != nil {
		return err
	}
	node := s.Node()
	ledger := pool
	if c.ledger != "" {
		if ledger, err = pgxpool.New(ctx, c.ledger); err != nil {
			return err
		}
		defer ledger.Close()
	}
	rec := &recorder{pool: ledger, node: node, now: cfg.Clock, downstream: c.downstream}
	if rec.now == nil {
		rec.now = time.Now
	}
	if err := ax.Handle(s, "work", func(ctx context.Context, j *ax.Job, p workPayload) error {
		return rec.work(ctx, j, time.Duration(p.MS)*time.Millisecond)
	}, c.workOptions()...); err != nil {
		return err
	}
	// The results scenarios' kinds need results and batches, which the
	// Citus store does not keep (it would refuse them here).
	if _, ok := st.(store.FollowUpStore); ok {
		if err := registerResults(s, pool, node); err != nil { // results.go
			return err
		}
	}
	if c.txhold {
		if err := registerTxHold(s, pool, node); err != nil { // txhold.go
			return err
		}
	}
	if c.periodicName != "" {
		if err := ax.Handle(s, c.periodicName, func(ctx context.Context, j *ax.Job, _ json.RawMessage) error {
			return rec.work(ctx, j, 0)
		}); err != nil {
			return err
		}
		if err := every(s, c.periodicName, c.periodicSpec); err != nil {
			return err
		}
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if err := s.Start(ctx); err != nil {
		return err
	}
	say("READY %s", node)
	quit, scheduling := make(chan struct{}), make(chan struct{})
	if c.schedRate > 0 {
		go scheduleWork(ctx, s, c, quit, scheduling)
	} else {
		close(scheduling)
	}
	<-sig
	close(quit)
	<-scheduling
	stopCtx, cancel := context.WithTimeout(ctx, c.stopTimeout)
	err = s.Stop(stopCtx)
	cancel()
	say("STOPPED %v", err)
	return nil
}

// every calls Scheduler.Every(name, spec, nil) if this build of AX has it.
// It goes through reflection so that the worker builds before periodic jobs
// land; the suite skips its periodic scenario when the method is missing.
func every(s *ax.Scheduler, name, spec string) error {
	m := reflect.ValueOf(s).MethodByName("Every")
	if !m.IsValid() {
		return errors.New("this AX has no Scheduler.Every")
	}
	out := m.Call([]reflect.Value{reflect.ValueOf(name), reflect.ValueOf(spec), reflect.Zero(m.Type().In(2))})
	if err, _ := out[0].Interface().(error); err != nil {
		return fmt.Errorf("every %q %q: %w", name, spec, err)
	}
	return nil
}

func observe(e ax.Event, sayFinished bool) {
	switch e.Kind {
	case ax.EventSucceeded:
		if sayFinished {
			say("EVENT succeeded %s %d", e.JobID, e.Attempt)
		}
	case ax.EventLeaderChanged:
		say("EVENT leader %t", e.Leader)
	case ax.EventLeaseLost:
		say("EVENT lease_lost %s", e.JobID)
	case ax.EventHandedBack:
		say("EVENT handed_back %s", e.JobID)
	case ax.EventKeyMissing:
		var se *ax.SealError
		key := ""
		if errors.As(e.Err, &se) {
			key = se.KeyID
		}
		say("EVENT key_missing %s %s", e.JobID, key)
	case ax.EventBreakerOpened:
		say("EVENT breaker open %s", e.At.Format(time.RFC3339Nano))
	case ax.EventBreakerHalfOpen:
		say("EVENT breaker half_open %s", e.At.Format(time.RFC3339Nano))
	case ax.EventBreakerClosed:
		say("EVENT breaker closed %s", e.At.Format(time.RFC3339Nano))
	}
}

// recorder writes executions.
type recorder struct {
	pool       *pgxpool.Pool // the ledger: executions' database
	node       string
	now        func() time.Time
	downstream bool // fail while the downstream table says down
}

// work records the start of an execution (retrying the insert until it
// lands or ctx ends, idempotently per job, attempt and node), works for d,
// then records how it ended (best effort), with the host times of its
// start and of its end (taken just before the write).
func (r *recorder) work(ctx context.Context, j *ax.Job, d time.Duration) error {
	hostStart := r.now()
	for {
		_, err := r.pool.Exec(ctx, `INSERT INTO executions (job_id, node, attempt, run_at, host_started_at, claimed_at, fence)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (job_id, attempt, node) DO NOTHING`, [16]byte(j.ID), r.node, j.Attempt, j.RunAt, hostStart, j.StartedAt, j.FencingToken)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("record execution: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	outcome := "ok"
	var werr error
	if r.downstream {
		var up bool
		if err := r.pool.QueryRow(ctx, `SELECT up FROM downstream`).Scan(&up); err != nil || !up {
			werr, outcome = errors.New("downstream unavailable"), "failed: downstream unavailable"
		}
	}
	if d > 0 && werr == nil {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			werr = context.Cause(ctx)
			outcome = "cancelled: " + werr.Error()
		}
	}
	hostEnd := r.now()
	give := time.Now().Add(15 * time.Second)
	for time.Now().Before(give) {
		fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := r.pool.Exec(fctx, `UPDATE executions SET finished_at = clock_timestamp(), outcome = $4, host_finished_at = $5
WHERE job_id = $1 AND attempt = $2 AND node = $3`, [16]byte(j.ID), j.Attempt, r.node, outcome, hostEnd)
		cancel()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return werr
}

// scheduleWork schedules c.schedRate work jobs a second, due at once,
// for c.schedFor or until quit is closed, and says what each call
// returned.
func scheduleWork(ctx context.Context, s *ax.Scheduler, c config, quit <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(time.Second / time.Duration(c.schedRate))
	defer tick.Stop()
	end := time.After(c.schedFor)
	ok, failed := 0, 0
	for {
		select {
		case <-quit:
			return
		case <-end:
			say("SCHEDULE_DONE %d %d", ok, failed)
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := s.Schedule(cctx, "work", workPayload{MS: c.schedMS})
		cancel()
		if err != nil {
			failed++
			say("ERROR %v", err)
			continue
		}
		ok++
		say("SCHEDULED %s", res.ID)
	}
}
