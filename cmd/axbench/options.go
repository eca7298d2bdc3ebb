package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// options are the command's flags. Every scenario's knobs default to the
// sizes of the issues that asked for them (issue 5; bigtable, heldxmin and
// wide: "Speed that holds"); -quick shrinks the ones not given explicitly.
type options struct {
	db         string
	json       bool
	quick      bool
	conns      int
	cpuProfile string
	memProfile string

	private       bool
	privatePort   int
	privateDir    string
	pgBin         string
	privateBuffer string
	privateUser   string
	privateSet    listFlag

	n          int    // throughput, multiprocess
	workers    string // throughput: comma-separated worker counts
	workerList []int

	citus            string // citus: the coordinator's URL
	citusShards      int
	citusNodes       string
	citusNodeList    []int
	citusCachedConns int
	procs            int // multiprocess
	mpWorkers        int
	probeEvery       time.Duration // multiprocess: High-priority probe jobs' interval (probe.go)

	lagJobs int
	lagMin  time.Duration
	lagMax  time.Duration

	immRate int
	immFor  time.Duration
	// immAt schedules each immediate job with ax.At(time.Now()) instead
	// of no time option, as a caller that stamps its jobs does.
	immAt bool
	// immFlush is the immediate scenario's Config.FlushInterval (0: the
	// default).
	immFlush time.Duration
	// immFloor is how long the immediate scenario measures the server's
	// commit floor before it starts (commitfloor.go; 0: not measured).
	immFloor time.Duration
	// noDirect turns the Scheduler's direct start off in every scenario
	// (Config.DisableDirectStart), for an A/B.
	noDirect bool
	// ride sets Config.OutcomesWithClaims in every scenario, worker
	// processes included (-outcomes-with-claims), for an A/B.
	ride bool
	// asyncCommits gives every scenario's store pgstore.WithAsyncClaimsAndOutcomes.
	asyncCommits bool
	// earlyStart gives every scenario's store pgstore.WithEarlyDirectStart.
	earlyStart bool
	// agedMix makes throughput's jobs half Normal ones due agedMixAge ago
	// and half High ones due at once (throughput.go, scheduleThroughputJobs).
	agedMix bool
	// viaPgBouncer: run each scenario again through this PgBouncer (pooler.go).
	viaPgBouncer string
	// rtt is the round trip a delay proxy adds to every connection to the
	// server (delayproxy.go; 0: none).
	rtt time.Duration

	rate       int
	susFor     time.Duration
	susMin     time.Duration
	susMax     time.Duration
	susBatchMS int

	backlogSizes    string
	backlogList     []int
	backlogFinished int
	backlogDue      int
	backlogRun      int
	rssFor          time.Duration

	stormJobs int
	stormDown time.Duration

	idleFor time.Duration

	insertSingle int
	insertTotal  int
	batches      string
	batchList    []int

	bigSizes    string
	bigSizeList []int
	bigWorkers  string
	bigWorkList []int
	bigFor      time.Duration
	bigWarmup   time.Duration
	bigFresh    bool
	feedBatch   int
	heldRate    int
	heldWorkers int
	// heldRescue is Config.RescueInterval in heldxmin (0: the default), for
	// an A/B of what the rescue of expired leases costs under a held snapshot.
	heldRescue   time.Duration
	heldClean    time.Duration
	heldWarmup   time.Duration
	heldHold     time.Duration
	heldRecovery time.Duration
	heldWindow   time.Duration
	wideWorkers  int
	wideBase     int
	wideFor      time.Duration
	wideInterval time.Duration

	flowReps        int
	flowRate        int
	flowLagJobs     int
	flowBreakerJobs int

	encryptOptions // encrypt.go
	noisyOptions   // noisy.go
}

// listFlag is a flag that may be given several times.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func (o *options) register(fs *flag.FlagSet) {
	o.registerEncrypt(fs) // encrypt.go
	o.registerNoisy(fs)   // noisy.go
	fs.StringVar(&o.db, "db", envOr("TEST_DATABASE_URL", defaultDB), "PostgreSQL server URL (default TEST_DATABASE_URL); each scenario creates and drops a database on it")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per scenario instead of tables")
	fs.BoolVar(&o.quick, "quick", false, "small sizes for a smoke test (flags given explicitly win)")
	fs.DurationVar(&o.rtt, "rtt", 0, "every scenario: add this round trip to every connection to the server (worker processes' too) through an in-process TCP proxy delaying each direction by half of it, e.g. 1ms (0 = connect directly)")
	fs.IntVar(&o.conns, "conns", 0, "pool size (pgxpool.Config.MaxConns); 0 = pgxpool's default, max(4, NumCPU)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process to `file` (worker processes write file.workerN)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile to `file` at exit")

	fs.BoolVar(&o.private, "private", false, "start a throwaway production-like PostgreSQL cluster (initdb + pg_ctl, autovacuum on) and run on it instead of -db; stopped and removed at exit")
	fs.IntVar(&o.privatePort, "private-port", 55432, "private: port of the cluster on 127.0.0.1 (0 = any free port)")
	fs.StringVar(&o.privateDir, "private-dir", os.TempDir(), "private: parent `directory` of the cluster's temporary directory")
	fs.StringVar(&o.pgBin, "pg-bin", "/usr/lib/postgresql/15/bin", "private: `directory` of initdb, pg_ctl and postgres")
	fs.StringVar(&o.privateBuffer, "private-shared-buffers", "2GB", "private: shared_buffers")
	fs.StringVar(&o.privateUser, "private-user", "postgres", "private: OS user running the cluster when axbench runs as root")
	fs.Var(&o.privateSet, "private-set", "private: one more postgresql.conf `name=value` (repeatable), e.g. -private-set autovacuum=off")

	fs.IntVar(&o.n, "n", 100_000, "throughput, multiprocess, citus: no-op jobs")
	fs.StringVar(&o.citus, "citus", os.Getenv("AX_CITUS_URL"), "citus: the URL of the Citus coordinator (default AX_CITUS_URL); the cluster must run on this machine")
	fs.IntVar(&o.citusShards, "citus-shards", 8, "citus: shards of the scenario's schema")
	fs.StringVar(&o.citusNodes, "citus-nodes", "1,2", "citus: worker node counts holding the shards, comma-separated")
	fs.IntVar(&o.citusCachedConns, "citus-cached-conns", 0, "citus: citus.max_cached_conns_per_worker of the scheduler's connections (0: the cluster's)")
	fs.StringVar(&o.workers, "workers", "100,1000", "throughput: Config.Workers values, comma-separated")
	fs.IntVar(&o.procs, "procs", 3, "multiprocess, flow: worker processes")
	fs.IntVar(&o.flowReps, "flow-reps", 3, "flow: runs of each configuration (the median counts)")
	fs.IntVar(&o.flowRate, "flow-rate", 500, "flow: the binding rate limit, starts per second")
	fs.IntVar(&o.flowLagJobs, "flow-lag-jobs", 3000, "flow: jobs drained through the rate limit")
	fs.IntVar(&o.flowBreakerJobs, "flow-breaker-jobs", 300, "flow: jobs held by the open breaker")
	fs.IntVar(&o.mpWorkers, "mp-workers", 100, "multiprocess: Config.Workers of each process")
	fs.DurationVar(&o.probeEvery, "probe-every", 20*time.Millisecond, "multiprocess: while the backlog lasts, schedule one High-priority job this often and time it from its insert to its handler's start (0: none)")

	fs.IntVar(&o.lagJobs, "lag-jobs", 30_000, "lag: jobs")
	fs.DurationVar(&o.lagMin, "lag-min", 2*time.Second, "lag: earliest offset")
	fs.DurationVar(&o.lagMax, "lag-max", 62*time.Second, "lag: latest offset (the run lasts about this long)")

	fs.IntVar(&o.immRate, "immediate-rate", 500, "immediate: Schedule calls per second")
	registerPooler(fs, o)
	fs.BoolVar(&o.asyncCommits, "async-commits", false, "every scenario: pgstore.WithAsyncClaimsAndOutcomes (claims and outcomes commit without waiting for the WAL flush)")
	fs.BoolVar(&o.agedMix, "aged-mix", false, "throughput: half the jobs Normal and due 2 minutes ago (aged at the default PriorityAging), half High and due at once, so that aging mixes the priorities while both last")
	fs.BoolVar(&o.earlyStart, "early-start", false, "every scenario: pgstore.WithEarlyDirectStart (a direct start's job starts while its insert is flushed)")
	fs.BoolVar(&o.ride, "outcomes-with-claims", false, "every scenario: Config.OutcomesWithClaims (a backlog claim writes the queued outcomes in its transaction), worker processes included")
	fs.BoolVar(&o.noDirect, "no-direct-start", false, "every scenario: Config.DisableDirectStart (Schedule never starts its job directly)")
	fs.BoolVar(&o.immAt, "immediate-at-now", false, "immediate: schedule each job with ax.At(time.Now()) rather than no time option")
	fs.DurationVar(&o.immFlush, "immediate-flush", 0, "immediate: Config.FlushInterval, how long outcomes gather before a Finish commits them (0 = the default)")
	fs.DurationVar(&o.immFloor, "immediate-floor", 10*time.Second, "immediate: how long to time one-row INSERT commits at the same rate before the Scheduler starts, the floor under Schedule's round trip (0 = skip)")
	fs.DurationVar(&o.immFor, "immediate-for", time.Minute, "immediate: how long to schedule (long enough for pgx's prepared statements to be on generic plans)")

	fs.IntVar(&o.rate, "rate", 5000, "sustained: delayed jobs scheduled per second")
	fs.DurationVar(&o.susFor, "sustained-for", 60*time.Second, "sustained: how long to schedule")
	fs.DurationVar(&o.susMin, "sustained-min", time.Second, "sustained: shortest delay")
	fs.DurationVar(&o.susMax, "sustained-max", 60*time.Second, "sustained: longest delay")
	fs.IntVar(&o.susBatchMS, "sustained-batch-ms", 10, "sustained: the producer calls ScheduleMany every this many ms")

	fs.StringVar(&o.backlogSizes, "backlog-sizes", "100000,1000000", "backlog: far-future job counts measured after the empty table, comma-separated, increasing")
	fs.IntVar(&o.backlogFinished, "backlog-finished", 1_000_000, "backlog: finished jobs added for the last measurement")
	fs.IntVar(&o.backlogDue, "backlog-due", 10_000, "backlog: due jobs claimed (100 per Claim) for claim latency")
	fs.IntVar(&o.backlogRun, "backlog-run", 20_000, "backlog: due no-op jobs run by a scheduler for throughput")
	fs.DurationVar(&o.rssFor, "rss-for", 5*time.Second, "backlog: how long the worker process runs before its RSS is read")

	fs.IntVar(&o.stormJobs, "storm-jobs", 1000, "retrystorm: jobs failing at once")
	fs.DurationVar(&o.stormDown, "storm-down", 10*time.Second, "retrystorm: how long the downstream is down")

	fs.DurationVar(&o.idleFor, "idle-for", 30*time.Second, "idle, citus-idle: measurement window")

	fs.IntVar(&o.insertSingle, "insert-single", 5000, "insert: Schedule calls one at a time")
	fs.IntVar(&o.insertTotal, "insert-total", 100_000, "insert: jobs per ScheduleMany batch size")
	fs.StringVar(&o.batches, "insert-batches", "100,10000", "insert: ScheduleMany batch sizes, comma-separated")

	fs.StringVar(&o.bigSizes, "bigtable-sizes", "1000000,10000000", "bigtable: finished rows in the table for the measurements after the empty one, comma-separated, increasing")
	fs.StringVar(&o.bigWorkers, "bigtable-workers", "100,1000", "bigtable: Config.Workers values, comma-separated")
	fs.DurationVar(&o.bigFor, "bigtable-for", 30*time.Second, "bigtable: measured time of each run (after the warm-up)")
	fs.DurationVar(&o.bigWarmup, "bigtable-warmup", 5*time.Second, "bigtable: unmeasured start of each run")
	fs.BoolVar(&o.bigFresh, "bigtable-fresh-stats", false, "bigtable: ANALYZE again once the producer's first batches are in, so the planner knows the backlog (default: the statistics of the VACUUM ANALYZE before the run, which saw no live job, as autoanalyze of a large history usually does)")
	fs.IntVar(&o.feedBatch, "feed-batch", 10_000, "bigtable, wide: jobs per ScheduleMany of the producer that keeps jobs available")

	fs.IntVar(&o.heldRate, "heldxmin-rate", 2000, "heldxmin: jobs scheduled per second")
	fs.IntVar(&o.heldWorkers, "heldxmin-workers", 100, "heldxmin: Config.Workers")
	fs.DurationVar(&o.heldRescue, "heldxmin-rescue-interval", 0, "heldxmin: Config.RescueInterval (0: the default)")
	fs.DurationVar(&o.heldClean, "heldxmin-clean", time.Minute, "heldxmin: phase before the snapshot is held")
	fs.DurationVar(&o.heldWarmup, "heldxmin-warmup", 10*time.Second, "heldxmin: start of the clean phase left out of its figures (new connections, first plans)")
	fs.DurationVar(&o.heldHold, "heldxmin-hold", 5*time.Minute, "heldxmin: how long one transaction holds an xid (BEGIN; SELECT txid_current())")
	fs.DurationVar(&o.heldRecovery, "heldxmin-recovery", 2*time.Minute, "heldxmin: phase after it is released")
	fs.DurationVar(&o.heldWindow, "heldxmin-window", 10*time.Second, "heldxmin: time-series window")

	fs.IntVar(&o.wideWorkers, "wide-workers", 1000, "wide: Config.Workers of the wide run")
	fs.IntVar(&o.wideBase, "wide-base", 100, "wide: Config.Workers of the run it is compared with")
	fs.DurationVar(&o.wideFor, "wide-for", 5*time.Minute, "wide: length of each run")
	fs.DurationVar(&o.wideInterval, "wide-interval", time.Minute, "wide: jobs/s reported per interval")
}

// quickValues are the -quick sizes, by flag name.
var quickValues = map[string]string{
	"n": "2000", "workers": "100", "procs": "2", "mp-workers": "50",
	"lag-jobs": "300", "lag-min": "1s", "lag-max": "2s",
	"immediate-rate": "200", "immediate-for": "1s", "immediate-floor": "500ms",
	"rate": "500", "sustained-for": "3s", "sustained-max": "3s",
	"backlog-sizes": "10000", "backlog-finished": "10000", "backlog-due": "1000", "backlog-run": "1000", "rss-for": "1s",
	"storm-jobs": "100", "storm-down": "2s",
	"idle-for":  "2s",
	"flow-reps": "1", "flow-lag-jobs": "500", "flow-breaker-jobs": "50",
	"insert-single": "300", "insert-total": "5000", "insert-batches": "100,1000",
	"bigtable-sizes": "2000,5000", "bigtable-for": "1s", "bigtable-warmup": "200ms", "feed-batch": "1000",
	"heldxmin-rate": "300", "heldxmin-clean": "2s", "heldxmin-warmup": "200ms", "heldxmin-hold": "2s", "heldxmin-recovery": "2s", "heldxmin-window": "1s",
	"wide-for": "2s", "wide-interval": "500ms",
	"noisy-partitions": "3", "noisy-bad": "1", "noisy-for": "2s", "noisy-warmup": "200ms", "noisy-hang": "1s", "noisy-rate": "100",
}

// applyQuick sets the -quick sizes of the flags not given explicitly.
func (o *options) applyQuick(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range quickValues {
		if !set[name] {
			if err := fs.Set(name, v); err != nil {
				panic(fmt.Sprintf("quick value of -%s: %v", name, err))
			}
		}
	}
}

// parseLists parses the comma-separated flags and checks the sizes.
func (o *options) parseLists() error {
	var err error
	if o.rtt < 0 {
		return fmt.Errorf("-rtt %v: want 0 or more", o.rtt)
	}
	if o.rtt > 0 && o.viaPgBouncer != "" {
		return errors.New("-rtt and -via-pgbouncer: the PgBouncer's connections would not go through the delay proxy; use one")
	}
	if o.citusNodeList, err = intList("citus-nodes", o.citusNodes); err != nil {
		return err
	}
	if o.workerList, err = intList("workers", o.workers); err != nil {
		return err
	}
	if o.backlogList, err = intList("backlog-sizes", o.backlogSizes); err != nil {
		return err
	}
	if o.batchList, err = intList("insert-batches", o.batches); err != nil {
		return err
	}
	if o.bigSizeList, err = intList("bigtable-sizes", o.bigSizes); err != nil {
		return err
	}
	if o.bigWorkList, err = intList("bigtable-workers", o.bigWorkers); err != nil {
		return err
	}
	for name, v := range map[string]int{
		"n": o.n, "procs": o.procs, "mp-workers": o.mpWorkers, "lag-jobs": o.lagJobs,
		"immediate-rate": o.immRate, "rate": o.rate, "sustained-batch-ms": o.susBatchMS,
		"backlog-due": o.backlogDue, "backlog-run": o.backlogRun, "storm-jobs": o.stormJobs,
		"insert-single": o.insertSingle, "insert-total": o.insertTotal,
		"feed-batch": o.feedBatch, "heldxmin-rate": o.heldRate, "heldxmin-workers": o.heldWorkers,
		"wide-workers": o.wideWorkers, "wide-base": o.wideBase,
	} {
		if v < 1 {
			return fmt.Errorf("-%s must be at least 1, not %d", name, v)
		}
	}
	if o.lagMin < 0 || o.lagMax <= o.lagMin {
		return fmt.Errorf("-lag-min %s and -lag-max %s: need 0 <= min < max", o.lagMin, o.lagMax)
	}
	if o.susMin < 0 || o.susMax <= o.susMin {
		return fmt.Errorf("-sustained-min %s and -sustained-max %s: need 0 <= min < max", o.susMin, o.susMax)
	}
	if o.backlogFinished < 0 || o.conns < 0 || o.immFloor < 0 {
		return fmt.Errorf("-backlog-finished, -conns and -immediate-floor must not be negative")
	}
	for name, d := range map[string]time.Duration{
		"bigtable-for": o.bigFor, "heldxmin-clean": o.heldClean, "heldxmin-hold": o.heldHold,
		"heldxmin-recovery": o.heldRecovery, "heldxmin-window": o.heldWindow, "wide-for": o.wideFor, "wide-interval": o.wideInterval,
	} {
		if d <= 0 {
			return fmt.Errorf("-%s must be positive, not %s", name, d)
		}
	}
	if o.heldWarmup < 0 || o.heldWarmup >= o.heldClean {
		return fmt.Errorf("-heldxmin-warmup %s must be at least 0 and shorter than -heldxmin-clean %s", o.heldWarmup, o.heldClean)
	}
	if o.bigWarmup < 0 || o.wideInterval > o.wideFor {
		return fmt.Errorf("-bigtable-warmup must not be negative, and -wide-interval must not exceed -wide-for")
	}
	if o.privatePort < 0 || o.privatePort > 65535 {
		return fmt.Errorf("-private-port %d is not a port", o.privatePort)
	}
	return nil
}

func intList(name, s string) ([]int, error) {
	var out []int
	prev := -1
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", name, f)
		}
		if (name == "backlog-sizes" || name == "bigtable-sizes") && v <= prev {
			return nil, fmt.Errorf("-%s must increase", name)
		}
		prev = v
		out = append(out, v)
	}
	return out, nil
}
