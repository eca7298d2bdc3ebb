// Package pgstore is the PostgreSQL store.Store of AX, on pgx v5 and
// pgxpool. It also implements store.Notifier (LISTEN/NOTIFY), store.Pruner,
// store.Lister, store.Counter, store.Closer and store.FlowStore (flow
// control across the cluster), and adds InsertTx to insert jobs inside a
// transaction of the caller's.
//
// # Usage
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	st, err := pgstore.New(ctx, pool) // pings, then migrates
//	...
//	defer st.Close() // the pool stays yours: close it after
//
// Inside a business transaction, so the job exists only if it commits:
//
//	tx, err := pool.Begin(ctx)
//	... // business writes
//	res, err := st.InsertTx(ctx, tx, []store.InsertParams{...})
//	err = tx.Commit(ctx) // listeners are notified now, not before
//
// # Schema and migrations
//
// All tables live in one PostgreSQL schema, "ax" unless WithSchema names
// another (a lower-case identifier, ^[a-z_][a-z0-9_]{0,62}$), so several
// applications can share a database. Migrations are versioned .sql files
// embedded in the binary; New runs Migrate unless given WithoutMigrate.
// Migrate is idempotent and safe when many hosts start at once: it runs in
// one transaction under an advisory lock keyed by the schema, records
// versions in the schema_version table, and refuses (ErrSchemaTooNew,
// changing nothing) a schema migrated by a newer version of this package.
//
// The tables: jobs; leader (the cluster leader's lease row), nodes (node
// registrations and heartbeats) and periodic (the last fired tick of each
// periodic schedule).
//
// Migration 0002 adds scheduled_at, fence and pause_requested to jobs and
// turns payload from jsonb into json. Changing the type rewrites the table
// and its indexes once (the backfill of existing rows, scheduled_at =
// run_at and fence = attempt, rides in the same pass), under an ACCESS
// EXCLUSIVE lock held until Migrate commits: claims and finishes wait
// meanwhile, 1.6 s for 200,000 jobs on a 2-core test machine. Upgrade a
// large table at a quiet time, or prune it first.
//
// # Payloads and validation
//
// Payloads live in a json column, which keeps the text it is given byte
// for byte (key order, whitespace, duplicate keys, numbers and escapes as
// written) while still refusing what is not JSON; jsonb would normalize
// all of it. Every path that writes a payload (Insert, InsertTx, COPY,
// FirePeriodic) sends the caller's bytes unchanged, and every read returns
// the column's text. Nothing queries into payloads. Metadata and attempt
// errors stay jsonb.
//
// Every call checks its params with their Validate methods before sending
// anything (texts, sizes, times and numbers PostgreSQL could not keep are
// refused there), and a write that PostgreSQL refuses for its data all the
// same (SQLSTATE class 22, data exceptions, or 23514, a check violation)
// fails with an error wrapping both store.ErrInvalidParams and the
// *pgconn.PgError, so that callers never retry it as a transient failure.
//
// # Indexes, and why claims are shaped per priority
//
// Every hot query rides a partial index that holds only the rows it can
// return, so its cost does not grow with finished jobs or with far-future
// ones:
//
//	jobs_claim_idx      (kind, priority, run_at) WHERE state IN ('scheduled', 'retrying')
//	jobs_unique_key_idx UNIQUE (unique_key) WHERE unique_key IS NOT NULL AND state <> 'cancelled'
//	jobs_lease_idx      (lease_expires_at) WHERE state = 'running'            -- RescueExpired
//	jobs_finished_idx   (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled') -- Prune
//	jobs_paused_idx     (kind) WHERE state = 'paused'                         -- CountJobs
//
// A claim is one UPDATE … FROM statement. A naive claim (WHERE run_at <=
// now() ORDER BY priority, run_at LIMIT n) walks, in a (priority, run_at)
// index, every future entry of a higher priority before reaching the due
// entries of a lower one: with a million far-future high-priority jobs that
// is thousands of buffers per claim. So the claim is shaped per (kind,
// priority): unnest($kinds) × unnest('{1,2,3}') CROSS JOIN LATERAL (SELECT
// … WHERE kind = k AND priority = p AND state IN (…) AND run_at <= now()
// ORDER BY run_at LIMIT least(kind limit, total) FOR UPDATE SKIP LOCKED).
// Each lateral is a range scan that stops at the first future row or at its
// limit. The candidates are cut to each kind's limit (row_number() over the
// kind, in claim order), then to the total limit in strict priority, run_at
// order; candidates locked but not taken are released at commit. The same
// statement stamps owner, lease_token (gen_random_uuid()), attempt + 1 and
// lease_expires_at from the database's now(), returns now(), and probes the
// index once per (kind, priority) for the earliest claimable run_at it left
// behind (ClaimResult.NextRunAt). With 1M far-future and 1M finished jobs a
// claim of 100 takes about 2 ms and touches about 1,300 buffers, nearly all
// of them the 100 updated rows (see TestClaimPlanUsesPartialIndex).
//
// Finish writes any number of outcomes in one statement (unnest arrays),
// each row guarded by lease_token and state = 'running', and matched to
// its job on (id, token), so that a zombie's outcome and the current
// holder's for the same job in one call cannot be mixed up; ExtendLeases
// extends all of a host's leases in one statement and reports the lost
// ones, likewise by (id, token). A claim adds one to each job's fence.
//
// Pausing a running job only sets pause_requested; Finish and
// RescueExpired read it when the attempt ends and write paused instead of
// retrying or scheduled (a requested cancel still wins). Inserts of one job take one round trip; several jobs go in one
// transaction, through COPY for rows without a unique key.
//
// The jobs table gets aggressive autovacuum settings (vacuum after 2% of
// rows change, fillfactor 85 for HOT updates): it is a queue whose rows are
// updated several times and then deleted by Prune.
//
// # Notifications
//
// Inserts, Resume, RunNow, and Finish or RescueExpired outcomes that make a
// job claimable again (never a paused one) send pg_notify on a channel named after the schema,
// in the same transaction, so they are delivered only on commit (and never
// for a rolled back InsertTx). They are coalesced: one notification per
// kind per statement, carrying {"kind", "run_at"} with the earliest run_at.
// Subscribe starts one goroutine with one dedicated connection that
// LISTENs, reconnecting with exponential backoff; notifications sent while
// it is disconnected are lost, which only delays jobs until the
// scheduler's next poll.
//
// # Flow control
//
// Migration 0007 adds the flows table (one row per kind with settings: the
// declared store.FlowConfig, the breaker's store.BreakerStatus, the rate
// bucket's theoretical arrival time and a pending counter), partition rate
// buckets, and partition_key and sequence_key columns on jobs with partial
// indexes: running jobs by (kind, partition_key), claimable jobs with a
// partition key, and live jobs of a sequence in (scheduled_at, id) order.
// Kinds without settings keep the one-statement paths above: a Store
// remembers for a second which kinds have settings or sequences (its own
// SetFlows and sequenced inserts refresh it at once), and only claims of
// kinds whose settings hold claims back (anything but a partition source
// and MaxPending) or that have sequences, or with ClaimParams.AgeAfter,
// take the flow path.
//
// A flow claim is one transaction. It locks the kinds' flows rows in
// kind order (FOR UPDATE: claims of one kind take turns across hosts,
// which is what makes the limits cluster-wide), reads clock_timestamp()
// once they are held (so a claim that waited never applies a time earlier
// than its predecessor wrote), runs the claim statement, reads what is
// left for NextRunAt and commits. Usually all of it goes in one batch,
// one round trip, which the server runs back to back: a kind's row is
// held only while it runs, never across a round trip to a busy host; the
// statement applies concurrency limits and rate buckets itself, and
// starts nothing of a kind whose breaker it finds open or half-open. Then,
// and for kinds with a partition rate, Go decides between the locks and
// the claim (none while the breaker is open, one probe while none runs
// once the cool-down passed), in a claim of two round trips. The claim statement counts
// the kind's (and each partition's) running jobs through the running
// index, so a slot frees whatever path the job leaves running by, a
// rescue included; takes only the first job of each sequence; reads
// partitioned kinds partition by partition so a busy partition does not
// starve the others; orders jobs past the aging bound first; and draws on
// the kind's and the partitions' rate buckets (store.RateLimit's GCRA, in
// SQL). Its plan is forced generic for the transaction (planning it costs
// three times running it), and the transaction commits without waiting
// for the WAL flush (synchronous_commit off), which shortens the time the
// kind's row is held: a claim lost in a server crash leaves its jobs
// claimable, and their holders' outcomes are refused (lease lost), as
// after a rescue. NextRunAt counts jobs held by a rate bucket or a
// breaker's cool-down at the time they are allowed, and leaves out those
// waiting for a running job to end, which FinishFlow announces: a
// notification for the kind when a job of a kind with a concurrency limit
// or a breaker leaves running while a host may be held back (running jobs
// at three quarters of the limit or more, a partition limit, a breaker
// not closed), since every notification makes every host claim; a
// rescue does the same, and a trigger for sequences.
//
// FinishFlow applies the outcomes as Finish does and feeds each applied
// row to its kind's breaker in the call's order, in the same transaction,
// so that no claim sees a failed attempt (or a probe) end without its
// verdict. The finish statement also returns the breakers of its kinds as
// it saw them: most outcomes change nothing (a success while the breaker
// is closed with no failure counted, anything while it is open), and
// those finishes commit without taking the kinds' rows; the others lock
// them, read them again and apply the outcomes to what they hold. Without
// any breaker it is one statement. Finish takes this path whenever some
// kind has settings.
//
// A kind's MaxPending is checked against a counter, never by counting
// jobs: inserts of the kind lock its flows row, fold in the deltas that a
// trigger appends when a counted job enters or leaves pending (a claim, a
// retry, a pause, a resume, a cancel) and add what they insert. Appending
// rather than updating keeps the trigger free of row locks, so finishes
// and cancels touching several kinds cannot deadlock on counters; the
// trigger's WHEN clause makes it free for jobs of other kinds. Producers
// of one kind take turns and never overshoot. InsertParams.PendingLimit
// (a bound on all kinds) counts pending jobs up to the bound, an
// index-only scan, without a lock: racing producers may overshoot it by
// their rows in flight. Jobs the store inserts itself (periodic ticks,
// follow-ups) are not counted.
//
// A partitioned kind's keys are found by skipping through
// jobs_partition_idx, one probe per key; the partition "" (jobs without a
// key) is read through jobs_claim_idx, filtered, so a kind whose due jobs
// nearly all have keys pays a walk over them for it on every claim (a
// known cost, not yet measured).
//
// Partition keys are derived at insert from the kind's PartitionSource as
// the Store last read it (store.PartitionKeyOf); jobs inserted before a
// kind got a source stay in the partition "". A host that has not yet
// learnt of a kind's new settings (up to a second) claims it the plain
// way, without its limits; jobs of a sequence are safe meanwhile, since a
// trigger lets only the flow claim start them.
//
// # Poolers
//
// LISTEN needs a session. If the pool goes through a transaction-mode
// pooler such as PgBouncer, give the listener a direct connection to the
// server with WithListenerConnString. Everything else works through such a
// pooler: the Store uses no session state, prepared statements aside (set
// the pool's DefaultQueryExecMode as your pooler requires).
package pgstore
