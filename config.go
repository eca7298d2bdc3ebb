package ax

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config configures a Scheduler. The zero value of every field but Store
// means its documented default.
type Config struct {
	// Store keeps the jobs. Required: memstore.New() for one process,
	// pgstore for a cluster.
	Store store.Store

	// Keys, when set, encrypts jobs at rest: every payload and result, and
	// the metadata values given with SecretMetadata, is sealed with the
	// ring's current key (AES-256-GCM, bound to its job) before it
	// reaches the store, and opened on this host just before the handler
	// runs. Older keys of the ring open the jobs they sealed (rotation:
	// see Admin.Reencrypt and docs/guide.md). A job whose sealed
	// value was changed, or moved from another job, fails its attempt
	// permanently with a *SealError naming the key; the host carries on.
	// A job whose key is not in this host's ring (or that a newer release
	// of ax sealed, or any sealed job on a host without Keys) is left for
	// a host that can open it: snoozed for KeyMissingDelay, the attempt
	// not counted, logged at warn and sent as EventKeyMissing, so that a
	// rolling deploy of a new key kills no job. Kinds, unique keys,
	// plain metadata and error texts stay plain, and a kind cannot be
	// partitioned by a payload field (PartitionByPayloadField). Every host
	// and tool that runs or reads the jobs needs the ring (AdminConfig.Keys,
	// ax serve --encryption-keys). Nil: nothing is encrypted.
	Keys *KeyRing

	// KeyMissingDelay is how long a job this host cannot open (its key is
	// not in Keys, see there) waits before it is claimed again, by any
	// host. Defaults to DefaultKeyMissingDelay (5s): short enough that a
	// job sealed with a new key mid-deploy soon reaches a host that has
	// it, long enough that a host lacking the key does not spin on it.
	KeyMissingDelay time.Duration

	// Logger receives structured logs: every job transition at debug,
	// failures at warn, dead jobs and lost leases at error. Defaults to a
	// logger writing warnings and errors to standard error, one line each
	// (zap's console encoder, no stack traces), so that failures are seen
	// even before a logger is set up; zap.NewNop() silences AX. A service
	// that logs with log/slog passes SlogLogger(its *slog.Logger).
	Logger *zap.Logger

	// Node names this host in job records and logs: valid UTF-8 without
	// NUL bytes, at most store.MaxKindLength (255) bytes. Defaults to
	// "<hostname>-<pid>-<start time>", which tells when and in what order
	// nodes started.
	Node string

	// Workers is how many handlers run at once on this host, at most
	// MaxWorkers. Defaults to 100. Handlers that query the database share
	// its pool with the store's claims and outcome writes: a pool smaller
	// than the handlers holding it at once slows both (lease extension
	// has pgstore's own connection, so it costs no lease); see pgstore's
	// package doc, Connections. With fewer than 400 Workers (the default
	// included) and handlers shorter than a claim, a host with due jobs
	// waiting holds up to 400 jobs (with fewer than 100 Workers, 100, or
	// as many up to 400 as its workers start within 2 ms at the recent
	// handlers' mean) and the ones beyond its free workers wait on it,
	// leased, for the next worker to free, about as long as the host's
	// next claim would have taken (takeahead.go); handlers still run at
	// most Workers at once. "Shorter than a claim" is judged by the mean
	// of the recent handlers: if they turn slow at once, a job taken
	// ahead that has waited ten claims' time for a worker, and at least
	// 250 ms, is handed back unstarted (attempt not counted) for any
	// host, and the host takes nothing ahead until its handlers end short
	// again. Set Workers to 400 or more, or keep each host's kinds alike
	// in duration, where even that wait matters.
	Workers int

	// DisableDirectStart turns off direct starts: by default Schedule of
	// one job that is due at once, of a kind this host handles, while a
	// worker slot is free and no job is due and waiting, inserts the job
	// already claimed by this host (stores implementing
	// store.InsertClaimer: pgstore and memstore) and starts it at once,
	// one store round trip after the call instead of an insert and then
	// a claim. Set it where producers should not run the jobs they
	// schedule while they have free workers, for example to leave a
	// busy API host's workers for jobs scheduled elsewhere.
	DisableDirectStart bool

	// OutcomesWithClaims makes a claim that serves a backlog (due jobs
	// left waiting for worker slots) write the outcomes queued by then in
	// the same store call, one transaction (stores implementing
	// store.FinishClaimer: pgstore; ignored by the others). It trades one
	// host's jobs per second for the database's work per job: measured
	// with pgstore and 100 workers, about 40 % fewer commits and 5-12 %
	// less server CPU per job, but 0.81-0.86 times the jobs per second,
	// since the claim now waits for the outcomes' writes that ran beside
	// it (at 1,000 workers 0.85 times and no saving; three hosts sharing
	// one database 0.91-0.97 times). With the database 1 ms away and
	// 100 workers taking jobs ahead (Workers), 0.89-0.92 times the jobs
	// per second for 9-10 % less server CPU per job, the claims waiting
	// for a connection the outcomes held (2026-12-06). Turn it on only
	// where the database's work costs more than the hosts' jobs per
	// second, and measure there (docs/performance.md, "Outcomes riding
	// with claims", "Taking ahead at the default width").
	OutcomesWithClaims bool

	// JobTimeout bounds each attempt of kinds without a Timeout option.
	// Defaults to 1 minute.
	JobTimeout time.Duration

	// MaxAttempts is the attempts a job gets when neither Schedule nor its
	// kind says otherwise (a kind's MaxAttempts holds on every host, see
	// the MaxAttempts option). Defaults to 20.
	MaxAttempts int

	// RetryPolicy is used by kinds without a Retry option. Defaults to
	// ExponentialBackoff{} (full jitter, 1s doubling to 1h).
	RetryPolicy RetryPolicy

	// LeaseDuration is how long a claimed job stays this host's without a
	// heartbeat. A host that dies has its jobs rerun elsewhere at most
	// LeaseDuration + RescueInterval·6/5 after its last heartbeat, whichever
	// host died (every host rescues, see RescueInterval); a shorter lease
	// means faster failover and more heartbeat writes. At least
	// MinLeaseDuration. Defaults to 10s.
	LeaseDuration time.Duration

	// HeartbeatInterval is how often running jobs' leases are extended (one
	// store call for all of them). A store slower than the interval still
	// extends them: a beat's call may take until the oldest lease it
	// carries would lapse, and the next beat waits for it, so a store that
	// answers within half a lease keeps every lease. Must be below
	// LeaseDuration. Defaults to LeaseDuration / 3.
	HeartbeatInterval time.Duration

	// PollInterval is the fallback claim interval, for wake-ups a store
	// notification missed (or stores without notifications). Defaults to
	// 1s.
	PollInterval time.Duration

	// FlushInterval is the longest an attempt's outcome waits to be written
	// with others in one batch. Defaults to 2ms.
	FlushInterval time.Duration

	// RescueInterval is how often each host takes back expired leases from
	// dead hosts (jittered by ±20%, so hosts do not all run it at once; the
	// operation is atomic, hosts split the work, and with nothing to rescue
	// it is one probe of a small index). Defaults to 1s.
	RescueInterval time.Duration

	// LeaderTTL is how long the maintenance leadership lasts without
	// renewal. One host of the cluster, the leader, runs the pruner and
	// marks dead nodes; it renews its lease, and the other hosts try to
	// take it, every LeaderTTL/3 (the same tick heartbeats this host's node
	// row; a store slower than that tick still renews or grants it: the
	// call may take until the lease would lapse). A leader that stops
	// gracefully releases the lease, and another
	// host takes it within LeaderTTL/3; one that dies is replaced within
	// about LeaderTTL + LeaderTTL/3. Failover of jobs does not wait for
	// it: every host rescues expired leases.
	//
	// Cost: one store call per HeartbeatInterval (LeaseDuration/3) per host
	// for its running jobs, plus two per LeaderTTL/3 per host for
	// leadership and node rows. Stores that cannot elect a leader (no
	// store.Leaser) prune on every host, which is harmless. At least
	// MinLeaseDuration. Defaults to 10s.
	LeaderTTL time.Duration

	// NodeTimeout is how long a node may go without a heartbeat before the
	// leader marks it dead in the node registry (see Scheduler.Nodes). It
	// must exceed LeaderTTL/3, the heartbeat interval. Defaults to
	// LeaderTTL * 3/2 (15s).
	NodeTimeout time.Duration

	// NodeRetention is how long stopped and dead nodes stay listed before
	// the leader removes them. Defaults to 1h.
	NodeRetention time.Duration

	// UnhandledKindGrace is how long a kind's jobs may be due with no
	// running node handling the kind before it counts as unhandled (a
	// misspelt kind, or hosts deployed without its handler): the leader
	// logs one warning per kind and emits EventKindUnhandled, and
	// Admin.Kinds, Stats, the dashboard, axprom and `ax kinds list` mark
	// it. A kind whose last host left less than UnhandledKindGrace ago (a
	// rolling deploy), or a cluster whose oldest running node started
	// less than UnhandledKindGrace ago, is not reported. See
	// store.UnhandledKinds. Cost: two store calls (ListNodes, OldestDue)
	// on the leader every UnhandledKindGrace/10, or every LeaderTTL/3
	// when that is longer. Defaults to 5 minutes.
	UnhandledKindGrace time.Duration

	// RefuseUnknownKinds makes Schedule (and ScheduleMany, ScheduleTx,
	// batches, follow-ups and Then; not periodic schedules, declared in
	// code, whose misspelt kind is reported as unhandled) refuse a kind that this host does not handle and that no node in
	// the registry lists (running, or stopped or dead within
	// NodeRetention), with an error matching ErrUnknownKind; nothing is
	// stored. The cluster's kinds are read with the node heartbeat (every
	// LeaderTTL/3) and, for a kind not found, again at most once per
	// LeaderTTL/3, so a Schedule costs no extra store call. It needs a
	// store with a node registry (store.NodeRegistry). Defaults to false:
	// any kind is stored, and waits for a host that handles it.
	RefuseUnknownKinds bool

	// Version names the software this host runs, recorded with its node.
	// Defaults to the main module's path and version from the binary's
	// build information.
	Version string

	// Retention is how long finished jobs (succeeded, dead, cancelled) are
	// kept before they are pruned, when the store can prune. Defaults to
	// 24h.
	Retention time.Duration

	// ReleaseTimeout is how long Stop goes on once its context ended:
	// handing unfinished jobs back, waiting for their handlers, writing
	// the last outcomes and leaving the cluster. Stop returns at most
	// ReleaseTimeout after its context's deadline, whatever the store
	// does. Defaults to 5s.
	ReleaseTimeout time.Duration

	// Middleware wraps every kind's handler; the first is the outermost.
	Middleware []Middleware

	// Observers receive an Event for every job transition on this host,
	// on one goroutine off the hot path (see Observer).
	Observers []Observer

	// EventBuffer is how many events may wait for slow Observers before
	// new ones are dropped (and counted, see Scheduler.DroppedEvents).
	// Defaults to 10000.
	EventBuffer int

	// MetadataFromContext, when set, is called by every Schedule call with
	// its context; the returned entries are added to the job's metadata
	// (explicit Metadata options win). axotel uses it to carry the trace
	// context from Schedule into the handler.
	MetadataFromContext func(ctx context.Context) map[string]string

	// Clock is the host clock, for tests. Defaults to time.Now. It only
	// drives wake-ups: due-ness is decided by the store's clock.
	Clock func() time.Time

	// MaxPending bounds the pending jobs (scheduled or retrying, due or
	// not) of all kinds together, for the jobs this Scheduler schedules:
	// Schedule returns an error matching ErrBackpressure once that many
	// are pending, or waits for room with WaitForCapacity. The store
	// counts at most MaxPending index entries to check it (never the
	// whole table). Per kind, see the MaxPending handler option. It
	// needs a store with flow control (store.FlowStore). Defaults to 0:
	// no bound.
	MaxPending int

	// PriorityAging bounds how long priorities can hold a due job back:
	// a job due for PriorityAging is claimed before every job that became
	// due after it, whatever their priorities, so a Low job waits at most
	// about PriorityAging (plus the time to run the jobs already due
	// before it) under a flood of High ones. In the normal case, where due
	// jobs start within moments, priorities stay strict. NoPriorityAging
	// turns it off. It needs a store with flow control (store.FlowStore;
	// other stores claim by strict priority). Defaults to 1 minute.
	//
	// Cost: on PostgreSQL a host that claims one kind takes its rows with
	// one locking range scan per priority (pgstore's claim of one kind),
	// aging or not, unless aging puts a lower priority's job before a
	// higher one's: while that lasts, claims rank candidates (the open
	// claim), and one claim a second first finds so (a few one-row index
	// probes), one more round trip (docs/performance.md, "The claim of
	// one kind applies aging").
	PriorityAging time.Duration
}

// NoPriorityAging, as Config.PriorityAging, keeps priorities strict:
// lower-priority jobs wait as long as higher ones are due.
const NoPriorityAging time.Duration = -1

// Bounds checked by New.
const (
	// MinLeaseDuration is the shortest LeaseDuration and LeaderTTL: the
	// heartbeat and election tick at a third of them, and a lease must
	// outlast a store round trip with room to spare.
	MinLeaseDuration = 10 * time.Millisecond
	// MaxWorkers is the largest Workers.
	MaxWorkers = 1 << 20
)

// Defaults applied by New.
const (
	DefaultWorkers        = 100
	DefaultJobTimeout     = time.Minute
	DefaultMaxAttempts    = 20
	DefaultLeaseDuration  = 10 * time.Second
	DefaultPollInterval   = time.Second
	DefaultFlushInterval  = 2 * time.Millisecond
	DefaultRescueInterval = time.Second
	DefaultRetention      = 24 * time.Hour
	DefaultReleaseTimeout = 5 * time.Second
	DefaultEventBuffer    = 10000
	DefaultLeaderTTL      = 10 * time.Second
	DefaultNodeRetention  = time.Hour
	DefaultPriorityAging  = time.Minute
	// DefaultUnhandledKindGrace is Config.UnhandledKindGrace's default.
	DefaultUnhandledKindGrace = 5 * time.Minute
	// DefaultKeyMissingDelay is Config.KeyMissingDelay's default.
	DefaultKeyMissingDelay = 5 * time.Second
)

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, fmt.Errorf("%w: Store is nil (use memstore.New() or pgstore.New)", ErrInvalidConfig)
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"JobTimeout", c.JobTimeout}, {"LeaseDuration", c.LeaseDuration},
		{"HeartbeatInterval", c.HeartbeatInterval}, {"PollInterval", c.PollInterval},
		{"FlushInterval", c.FlushInterval}, {"RescueInterval", c.RescueInterval},
		{"Retention", c.Retention}, {"ReleaseTimeout", c.ReleaseTimeout},
		{"LeaderTTL", c.LeaderTTL}, {"NodeTimeout", c.NodeTimeout}, {"NodeRetention", c.NodeRetention},
		{"UnhandledKindGrace", c.UnhandledKindGrace}, {"KeyMissingDelay", c.KeyMissingDelay},
	}
	for _, d := range durations {
		if d.v < 0 {
			return c, fmt.Errorf("%w: %s is negative (%s)", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.PriorityAging < 0 && c.PriorityAging != NoPriorityAging {
		return c, fmt.Errorf("%w: PriorityAging is negative (%s; NoPriorityAging turns it off)", ErrInvalidConfig, c.PriorityAging)
	}
	if c.MaxPending < 0 || c.MaxPending > store.MaxAttemptsLimit {
		return c, fmt.Errorf("%w: MaxPending %d not in [0, %d]", ErrInvalidConfig, c.MaxPending, store.MaxAttemptsLimit)
	}
	if _, ok := c.Store.(store.FlowStore); c.MaxPending > 0 && !ok {
		return c, fmt.Errorf("%w: MaxPending needs a store with flow control (store.FlowStore); %T has none", ErrInvalidConfig, c.Store)
	}
	if _, ok := c.Store.(store.NodeRegistry); c.RefuseUnknownKinds && !ok {
		return c, fmt.Errorf("%w: RefuseUnknownKinds needs a store with a node registry (store.NodeRegistry); %T has none", ErrInvalidConfig, c.Store)
	}
	if c.Workers < 0 || c.MaxAttempts < 0 || c.EventBuffer < 0 {
		return c, fmt.Errorf("%w: Workers (%d), MaxAttempts (%d) and EventBuffer (%d) must not be negative",
			ErrInvalidConfig, c.Workers, c.MaxAttempts, c.EventBuffer)
	}
	if c.Workers > MaxWorkers {
		return c, fmt.Errorf("%w: Workers %d is more than %d", ErrInvalidConfig, c.Workers, MaxWorkers)
	}
	if c.MaxAttempts > store.MaxAttemptsLimit {
		return c, fmt.Errorf("%w: MaxAttempts %d is more than %d", ErrInvalidConfig, c.MaxAttempts, store.MaxAttemptsLimit)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"LeaseDuration", c.LeaseDuration}, {"LeaderTTL", c.LeaderTTL}} {
		if d.v != 0 && d.v < MinLeaseDuration {
			return c, fmt.Errorf("%w: %s %s is below %s", ErrInvalidConfig, d.name, d.v, MinLeaseDuration)
		}
	}
	if err := store.CheckText(c.Node, store.MaxKindLength); err != nil {
		return c, fmt.Errorf("%w: Node: %w", ErrInvalidConfig, err)
	}
	if err := store.CheckText(c.Version, store.MaxKindLength); err != nil {
		return c, fmt.Errorf("%w: Version: %w", ErrInvalidConfig, err)
	}
	for _, o := range c.Observers {
		if o == nil {
			return c, fmt.Errorf("%w: nil Observer", ErrInvalidConfig)
		}
	}
	for _, mw := range c.Middleware {
		if mw == nil {
			return c, fmt.Errorf("%w: nil Middleware", ErrInvalidConfig)
		}
	}
	setDefault(&c.Workers, DefaultWorkers)
	setDefault(&c.JobTimeout, DefaultJobTimeout)
	setDefault(&c.MaxAttempts, DefaultMaxAttempts)
	setDefault(&c.LeaseDuration, DefaultLeaseDuration)
	setDefault(&c.HeartbeatInterval, c.LeaseDuration/3)
	setDefault(&c.PollInterval, DefaultPollInterval)
	setDefault(&c.FlushInterval, DefaultFlushInterval)
	setDefault(&c.RescueInterval, DefaultRescueInterval)
	setDefault(&c.Retention, DefaultRetention)
	setDefault(&c.ReleaseTimeout, DefaultReleaseTimeout)
	setDefault(&c.EventBuffer, DefaultEventBuffer)
	setDefault(&c.LeaderTTL, DefaultLeaderTTL)
	setDefault(&c.KeyMissingDelay, DefaultKeyMissingDelay)
	setDefault(&c.NodeTimeout, c.LeaderTTL*3/2)
	setDefault(&c.NodeRetention, DefaultNodeRetention)
	setDefault(&c.UnhandledKindGrace, DefaultUnhandledKindGrace)
	setDefault(&c.PriorityAging, DefaultPriorityAging)
	if c.NodeTimeout <= c.LeaderTTL/3 {
		return c, fmt.Errorf("%w: NodeTimeout %s must exceed the node heartbeat interval LeaderTTL/3 (%s)", ErrInvalidConfig, c.NodeTimeout, c.LeaderTTL/3)
	}
	if c.Version == "" {
		c.Version = store.TruncateText(defaultVersion(), store.MaxKindLength)
	}
	if c.HeartbeatInterval >= c.LeaseDuration {
		return c, fmt.Errorf("%w: HeartbeatInterval %s must be below LeaseDuration %s", ErrInvalidConfig, c.HeartbeatInterval, c.LeaseDuration)
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = ExponentialBackoff{}
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Node == "" {
		c.Node = store.TruncateText(defaultNodeName(c.Clock()), store.MaxKindLength)
	}
	return c, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// defaultNodeName is "<hostname>-<pid>-<start time>": unique per process,
// and sortable by start within a host.
func defaultNodeName(now time.Time) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), now.UTC().Format("20060102T150405.000"))
}

// defaultLogger writes warnings and errors to standard error, one line
// each, in zap's console format, without stack traces (panics in handlers
// carry their own stack in the error).
func defaultLogger() *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeDuration = zapcore.MillisDurationEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.WarnLevel)
	return zap.New(core).Named("ax")
}
