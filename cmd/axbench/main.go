// Command axbench measures AX on PostgreSQL: throughput, start lag,
// punctuality under load, claim cost with a large backlog, memory, retry
// storms, idle cost and insert rates, and whether the speed holds as the
// table grows, batches widen and vacuum is held back. Each scenario runs in
// a database of its own (CREATE DATABASE axbench_<random>, migrated by
// pgstore) that is dropped afterwards.
//
//	go run ./cmd/axbench [flags] SCENARIO...   # or "all"
//	go run ./cmd/axbench -quick all            # small sizes: a smoke test
//	go run ./cmd/axbench -json lag             # one JSON object per scenario
//	go run ./cmd/axbench -private bigtable heldxmin wide lag immediate throughput
//
// Scenarios (run with -h for every flag and its default):
//
//   - throughput: no-op jobs/s of one Scheduler per -workers value after a
//     COPY insert of -n jobs, CPU per 1k jobs, and the server's cost per
//     job (see below).
//   - multiprocess: no-op jobs/s over -procs worker processes, and proof
//     of zero duplicates.
//   - lag: jobs scheduled with ax.At uniformly -lag-min to -lag-max ahead
//     (a minute by default); start lag on the host clock (handler start
//     minus t) and on the store clock (Job.StartedAt − Job.RunAt).
//   - immediate: Schedule one job at a time at -immediate-rate for
//     -immediate-for (a minute); start lag on the host clock from before the
//     Schedule call and from its return, and on the store clock; the call
//     split into pool acquire, statement round trip, the store's and
//     Schedule's own Go code; the statement's server time, WAL syncs, CPU
//     waits of both processes and what the backends were waiting on. First,
//     for -immediate-floor (10 s), one-row INSERT commits at the same rate
//     on a plain table: the floor no durable Schedule can go below.
//   - sustained: delayed jobs at a steady -rate; start lag, CPU, backlog.
//   - backlog: Claim latency, throughput and RSS with far-future and
//     finished jobs in the table.
//   - retrystorm, idle, insert: retries per 100 ms when many jobs fail at
//     once; CPU of an idle scheduler; Schedule and ScheduleMany rates.
//   - bigtable: no-op jobs/s at each -bigtable-workers value (100, 1000) on
//     an empty table, then after bulk-loading -bigtable-sizes finished rows
//     (1M, 10M; INSERT … SELECT generate_series, then VACUUM ANALYZE and
//     CHECKPOINT), each run -bigtable-for (30 s) after -bigtable-warmup, and
//     its ratio to the empty table's (target ≥ 80%). A producer keeps jobs
//     available (-feed-batch); the run's jobs are deleted after it.
//   - heldxmin: a producer at -heldxmin-rate (2,000 jobs/s) against a
//     Scheduler; clean phase (-heldxmin-clean, 60 s), then a connection
//     holds BEGIN; SELECT txid_current() (-heldxmin-hold, 5 min), then
//     recovery (-heldxmin-recovery, 2 min). Per phase and per
//     -heldxmin-window (10 s): completion rate, start lag p50/p99 at the
//     handler (host clock), Claim and Finish time (a wrapper of
//     pgstore.Store), queue depth, n_dead_tup of every table in the
//     schema, the oldest transaction's age, and with pg_stat_statements
//     (-private loads it) the statements that took the server's time.
//     Targets: held rate ≥ 90% of clean, held lag p99 ≤ 2× clean, recovery
//     within 60 s of the release.
//   - flow: over -procs processes at each -workers value, no-op jobs/s
//     with a GlobalConcurrency and a RateLimit that do not bind against
//     none (-flow-reps runs each, median; target ≥ 90%); then the start
//     lag of jobs released by a RateLimit(-flow-rate, 1s) window (replayed
//     from the bucket's rules) and by a closing breaker (target p99 ≤ 50
//     ms).
//   - wide: one Scheduler of -wide-workers (1000) for -wide-for (5 min)
//     with a producer keeping jobs available; jobs/s per -wide-interval
//     (a minute), last vs first within ±10%, and against a run of
//     -wide-base workers (100) of the same length (target ≥ 1.5×).
//
// Server cost per job (throughput, bigtable, wide): WAL bytes
// (pg_current_wal_lsn() difference), full-page images (pg_stat_wal),
// commits (pg_stat_database.xact_commit) and n_tup_hot_upd / n_tup_upd of
// every table in the store's schema, found through pg_stat_user_tables so
// that a new storage layout needs no change here; and how often the
// scheduler's prepared statements ran on generic and custom plans.
//
// The server: -db (default TEST_DATABASE_URL, else the local server), or
// with -private a throwaway cluster that axbench creates with initdb and
// pg_ctl in a temporary directory (-private-dir) on -private-port (55432),
// with production-like settings (autovacuum on, shared_buffers
// -private-shared-buffers, larger max_wal_size, synchronous_commit on,
// pg_stat_statements; more with -private-set name=value), run as
// -private-user when axbench runs as root, and stopped and removed at the
// end, on error and on Ctrl-C. The machine's shared server runs with
// autovacuum off, a CI setting no production server has, which changes
// every figure that depends on the table's history.
//
// Distance: -rtt D (e.g. 1ms) runs every scenario with the server a round
// trip D away: an in-process TCP proxy (delayproxy.go) forwards each
// direction D/2 after reading it, in order, and every connection of the
// run goes through it, worker processes' included (their connection
// strings derive from -db, which then names the proxy). The report's
// server line says the added round trip. Not with -via-pgbouncer.
//
// The report starts with the machine and every non-default setting of the
// server; each scenario names its server and the load average before and
// after it: on a shared machine figures are only as good as that load.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(workerMain(os.Args[1:]))
	}
	os.Exit(benchMain(os.Args[1:], os.Stdout, os.Stderr))
}

// scenario is one benchmark.
type scenario struct {
	name  string
	about string
	run   func(ctx context.Context, b *bench) (*result, error)
}

var scenarios = []scenario{
	{"throughput", "no-op jobs/s and CPU per 1k jobs in one process (COPY insert first)", runThroughput},
	{"multiprocess", "no-op jobs/s over several processes on one database, and proof of zero duplicates", runMultiprocess},
	{"lag", "start lag of jobs scheduled uniformly ahead, overall and per second of offset", runLag},
	{"immediate", "insert-to-start latency of jobs scheduled one at a time at a steady rate", runImmediate},
	{"sustained", "start lag, CPU and backlog while delayed jobs arrive at a steady rate", runSustained},
	{"backlog", "claim latency, throughput and RSS with far-future and finished jobs in the table", runBacklog},
	{"retrystorm", "retries per 100 ms when many jobs fail at once, jittered vs plain backoff", runRetryStorm},
	{"idle", "CPU of a scheduler with handlers and no jobs", runIdle},
	{"insert", "Schedule latency one at a time and ScheduleMany rates", runInsert},
	{"bigtable", "no-op jobs/s on an empty table, then with 1M and 10M finished rows, and each against empty", runBigtable},
	{"heldxmin", "completion rate, start lag and claim latency before, while and after a transaction holds back vacuum", runHeldXmin},
	{"wide", "jobs/s per minute of a long W=1000 run, and against W=100", runWide},
	{"flow", "overhead of a global limit and a rate limit that do not bind, and the start lag of jobs a rate limit or a closing breaker releases", runFlow},
	{"citus", "no-op jobs/s on a Citus cluster (-citus), with coordinator and worker node CPU per 1k jobs, for 1 and 2 worker nodes", runCitus},
	{"citus-idle", "what one idle host costs a Citus cluster (-citus): transactions and CPU per second on the coordinator and the worker nodes", runCitusIdle},
	{"noisy", "noisy neighbour: healthy partitions' start lag while other partitions' jobs hang, against none hanging", runNoisy},
}

// bench is the state shared by the scenarios of one run.
type bench struct {
	opt     options
	stdout  io.Writer
	stderr  io.Writer
	machine machine
	via     string // the PgBouncer of the scenario running now, if any (pooler.go)
}

// lockedWriter serializes the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// progressf writes a progress line to stderr.
func (b *bench) progressf(format string, args ...any) {
	fmt.Fprintf(b.stderr, "axbench: "+format+"\n", args...)
}

// benchMain runs the command with args and returns its exit code.
func benchMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("axbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opt options
	opt.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: axbench [flags] SCENARIO... (or all)\n\nscenarios:\n")
		for _, s := range scenarios {
			fmt.Fprintf(stderr, "  %-13s %s\n", s.name, s.about)
		}
		fmt.Fprintf(stderr, "\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if opt.quick {
		opt.applyQuick(fs)
	}
	if err := opt.parseLists(); err != nil {
		fmt.Fprintln(stderr, "axbench:", err)
		return 2
	}
	todo, err := selectScenarios(fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "axbench:", err)
		fs.Usage()
		return 2
	}
	todo = withPoolerRuns(todo, opt.viaPgBouncer)
	if opt.cpuProfile != "" {
		f, err := os.Create(opt.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Worker processes' stderr is copied into it by one goroutine each
	// (os/exec), beside the progress lines: one lock serializes them.
	b := &bench{opt: opt, stdout: stdout, stderr: &lockedWriter{w: stderr}}
	kind := "shared"
	if opt.private {
		pc, err := startPrivateCluster(ctx, privateConfig{bin: opt.pgBin, parent: opt.privateDir, port: opt.privatePort,
			sharedBuffers: opt.privateBuffer, osUser: opt.privateUser, extra: opt.privateSet}, b.progressf)
		if err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			return 1
		}
		// Deferred before anything else can fail, and run on Ctrl-C too:
		// the signal only cancels ctx, so the scenario returns and
		// benchMain unwinds to here.
		defer func() {
			b.progressf("private cluster: stopping and removing %s", pc.dir)
			pc.stop()
		}()
		b.opt.db, kind = pc.url, "private"
	}
	serverAddr := hostPort(b.opt.db)
	if opt.rtt > 0 {
		proxy, err := b.distance(opt.rtt)
		if err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			return 1
		}
		defer proxy.Close()
	}
	b.machine, err = describeMachine(ctx, b.opt.db, kind)
	if err != nil {
		fmt.Fprintln(stderr, "axbench:", err)
		return 1
	}
	b.machine.Server.Addr = serverAddr
	b.machine.Server.RTT = opt.rtt.String()
	if !opt.json {
		b.machine.print(stdout)
	}
	code := 0
	for _, sc := range todo {
		r, err := runOne(ctx, b, sc)
		if err != nil {
			fmt.Fprintf(stderr, "axbench: %s: %v\n", sc.name, err)
			code = 1
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if opt.json {
			r.Machine = &b.machine
			if err := r.writeJSON(stdout); err != nil {
				fmt.Fprintln(stderr, "axbench:", err)
				return 1
			}
		} else {
			r.printTable(stdout)
		}
	}
	if opt.memProfile != "" {
		if err := writeHeapProfile(opt.memProfile); err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			code = 1
		}
	}
	return code
}

// distance starts a delay proxy adding rtt to every round trip to the
// server and points b.opt.db, from which every connection string of the
// run derives (worker processes' included), at it.
func (b *bench) distance(rtt time.Duration) (*delayProxy, error) {
	target, err := serverHostPort(b.opt.db)
	if err != nil {
		return nil, err
	}
	p, err := startDelayProxy(target, rtt)
	if err != nil {
		return nil, err
	}
	dsn, err := withHostPort(b.opt.db, p.Addr())
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	b.progressf("delay proxy %s → %s adds a %v round trip", p.Addr(), target, rtt)
	b.opt.db = dsn
	return p, nil
}

// runOne runs a scenario and stamps its load and duration.
func runOne(ctx context.Context, b *bench, sc scenario) (*result, error) {
	b.progressf("%s: starting", sc.name)
	load := loadAvg()
	start := time.Now()
	r, err := sc.run(ctx, b)
	if err != nil {
		return nil, err
	}
	r.Scenario = sc.name
	if r.Server == "" { // citus names its cluster itself
		r.Server = b.machine.Server.label()
	}
	r.LoadBefore, r.LoadAfter = load, loadAvg()
	r.Seconds = time.Since(start).Seconds()
	b.progressf("%s: done in %.1fs", sc.name, r.Seconds)
	return r, nil
}

func selectScenarios(names []string) ([]scenario, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("name at least one scenario, or all")
	}
	var out []scenario
	for _, n := range names {
		if n == "all" {
			return scenarios, nil
		}
		found := false
		for _, s := range scenarios {
			if s.name == n {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q", n)
		}
	}
	return out, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// defaultDB is the server used when neither -db nor TEST_DATABASE_URL is
// given.
const defaultDB = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}
