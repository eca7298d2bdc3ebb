// Package pgstore is the PostgreSQL store.Store of AX, on pgx v5 and
// pgxpool. It also implements store.Notifier (LISTEN/NOTIFY), store.Pruner,
// store.Lister, store.Counter, store.FollowUpStore, store.BatchStore,
// store.FlowStore (flow control across the cluster) and store.Closer, and
// adds InsertTx, InsertBatchTx and CompleteTx to insert jobs, insert a
// batch and end a job inside a transaction of the caller's. It also
// implements the operator's interfaces (see Operator API below).
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
// The tables: jobs (live jobs and the recently finished); jobs_history
// (finished jobs, partitioned by day; see "Finished jobs" below); leader
// (the cluster leader's lease row), nodes (node registrations and
// heartbeats), periodic (the last fired tick of each periodic schedule,
// its pause and job template), kind_states (paused kinds) and nonces (the
// HTTP API's request nonces, and the dashboard's revocations as
// "revoked:" + name).
//
// # Finished jobs
//
// Migration 0008 moves finished jobs out of the hot table. A job's end is
// its last write: the Finish statement (Finish, FinishFlow, and CompleteTx
// in the caller's transaction) that makes a job succeeded, dead or
// cancelled deletes it from jobs and inserts its final row into
// jobs_history in the same statement. A job stays in jobs when something
// still needs it there: a unique key that still holds (a scope with
// Finished until it is pruned; a Period until the period has passed since
// it finished), because jobs_unique_scope_idx covers jobs alone;
// follow-ups, a batch or a sequence, whose triggers act on an UPDATE of
// the job's state; a result written after the outcome. Store.Archive
// (store.Archiver; the ax runtime calls it every second on every host)
// moves those, and the jobs that rescues and operators end, in batches,
// each a short transaction locking only the rows it moves, once their key
// is free. jobs_history is partitioned by UTC day of finished_at
// (jobs_history_pYYYYMMDD; a Store makes its day's and the next day's
// partition ahead of its Finish calls, once a day, and an archive batch
// makes any other it needs); Prune drops a day's partition once the
// whole day is past the retention, and deletes row by row only in the
// partition the boundary falls in. So claims, finishes, lease extensions
// and rescues work on a table and indexes holding the live jobs and the
// last second of finished ones, however long the retention, and retention
// costs one DROP TABLE a day.
//
// A day is dropped by DETACH PARTITION … CONCURRENTLY, then DROP TABLE.
// Each DETACH CONCURRENTLY and each FINALIZE (which completes a detach
// that was interrupted) is cancelled after 1 s: they wait for long
// transactions that touched jobs_history, and FINALIZE for every older
// snapshot while it holds the lock an ATTACH of a new day needs, so
// unbounded they stalled the leader's maintenance and failed the next
// day's ATTACH on its 2 s lock timeout. A day cut short stays attached or
// pending, and the next Prune tries again. A day whose DETACH committed
// without its DROP (a failure in between) is still found, as a table of
// the Store's schema named jobs_history_pYYYYMMDD with exactly
// jobs_history's columns that is nobody's partition, and dropped once
// past the retention; no other table is touched (rename or move a day
// you detach to keep).
//
// An ID is unique across jobs and jobs_history: an insert whose ID is
// that of a job in the history fails with store.ErrInvalidParams, as one
// in jobs does. The look into the history probes only the day partitions
// a job with that UUIDv7 could have finished in (from the ID's time less
// an hour on: today's and the next day's for an ID made now), and every
// partition for an ID of another version; it rides in the statement of a
// one-row insert and is one statement before a several-row one. It
// misses a UUIDv7 made on a clock more than an hour ahead of the
// database's whose job finished before the database reached that time
// less an hour; ax makes each ID at the insert.
//
// Reads see both tables through the view jobs_all: Get, ListJobs,
// CountMatching, CountJobs, List, FollowUps and BatchChildren return
// archived jobs exactly as before they moved (a move is one statement, so
// a read sees a job once). A change to a finished job (Control's run-now,
// Bulk's run-now and delete) moves it back to jobs first. The history is
// new in 0008 and starts empty; the finished rows already in jobs move
// over in Archive's batches after the upgrade, so the migration itself
// only creates tables and rebuilds jobs_finished_idx.
//
// Migration 0002 adds scheduled_at, fence and pause_requested to jobs and
// turns payload from jsonb into json. Changing the type rewrites the table
// and its indexes once (the backfill of existing rows, scheduled_at =
// run_at and fence = attempt, rides in the same pass), under an ACCESS
// EXCLUSIVE lock held until Migrate commits: claims and finishes wait
// meanwhile, 1.6 s for 200,000 jobs on a 2-core test machine. Upgrade a
// large table at a quiet time, or prune it first.
//
// # Durability of claims and outcomes
//
// Every write commits as the server's synchronous_commit says (on by
// default: the commit waits for the WAL flush), so a claim or a success
// a host saw written survives a server crash and, with a synchronous
// standby, a failover. WithAsyncClaimsAndOutcomes relaxes this for the
// runtime's hot path only: the plain claim (in its batch's implicit
// transaction), Finish and FinishFlow commit their own transactions with
// synchronous_commit off, which takes the WAL flush (0.4 ms on the quiet
// test machine, about 2 ms with two busy programs beside) out of every
// claim's and finish's round trip. A claim or an outcome written in the
// last moments before a crash or a failover can then be lost: a job
// whose outcome is lost is still running under its old lease and runs
// again once the lease expires; a job whose claim is lost is claimable
// at once, and its next run carries the lost claim's attempt number and
// fencing token. Inserts (direct starts included), lease extensions,
// rescues, operator actions and CompleteTx (the caller's transaction)
// keep the server's setting, so no job whose insert returned is lost. A
// flush later in the WAL makes every earlier commit durable, so what
// survives a crash is always a consistent state. The flow claim commits
// without the wait whatever the option (see Flow control).
//
// WithEarlyDirectStart does the same for a direct start's insert
// (InsertClaimed), and only when the Scheduler can start the job during
// the flush: the insert commits without the wait, the job is handed to
// the Scheduler, and a second transaction, a logical message that
// commits with the server's setting, waits for the flush (and the
// synchronous standby) before InsertClaimed returns. A job whose
// Schedule returned is still durable; a job that started may be lost
// with a crash during that wait, its Schedule then failing.
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
// Every hot query rides an index that holds only the rows it can return,
// so its cost does not grow with finished jobs or with far-future ones
// (docs/storage.md has the details and measurements):
//
//	jobs_pkey           (id)                                                  -- every write, by primary key
//	jobs_claim_idx      (kind, priority, run_at) WHERE state IN ('scheduled', 'retrying')
//	jobs_unique_scope_idx UNIQUE (kind or '' if global, unique_period, unique_window, unique_key)
//	                    WHERE the job holds its key: live, or finished (not cancelled) when its scope keeps it
//	jobs_busy_idx       (kind, state, partition_key) WHERE state IN ('running', 'paused')
//	                    -- RescueExpired, CountJobs, running counts of concurrency limits
//	jobs_partition_idx  (kind, partition_key, priority, run_at) WHERE claimable and partition_key <> ''
//	jobs_unkeyed_idx    (kind, priority, run_at) WHERE claimable and unkeyed  -- flow claims, partition ""
//	jobs_finished_idx   (finished_at) WHERE finished and free to move          -- Archive, Prune
//	jobs_kept_idx       (finished_at) WHERE finished and keeping its key        -- Prune
//
// No index holds lease_expires_at (migration 0003 dropped jobs_lease_idx),
// so a lease extension changes no indexed column and can be a HOT update;
// RescueExpired reads the running jobs through jobs_busy_idx, with a
// plain index scan that marks the entries of finished jobs dead as it
// passes them (rescueScanSQL), and sorts them by expiry. State
// transitions change state, which every partial index's predicate reads,
// so they are never HOT.
//
// A claim is one statement. A naive claim (WHERE run_at <= now() ORDER BY
// priority, run_at LIMIT n) walks, in a (priority, run_at) index, every
// future entry of a higher priority before reaching the due entries of a
// lower one. So the claim is shaped per (kind, priority): unnest($kinds) ×
// unnest('{1,2,3}') CROSS JOIN LATERAL a range scan of jobs_claim_idx in
// run_at order that stops at the first future row or at one row more
// than the claim could take from the range, plus, when the range ran
// out of due rows, one descent from now() for its first future row. These
// candidates are chosen without locks; they are cut to each kind's limit
// (row_number() over the kind, in claim order), then to the total limit in
// claim order (jobs due for ClaimParams.AgeAfter first, oldest first; then
// strict priority, run_at), and only then locked, one primary-key
// probe each, FOR UPDATE SKIP LOCKED with state and run_at re-checked. If
// some were skipped (another claim holds or took them), the statement
// says how many, and the Store runs a second round, a statement of its
// own after the first committed: it reads each range's next rows as the
// first did, with more to step over, puts them in the same claim order
// (due-ness and aging at the first statement's now()), and walks them
// with a recursive CTE that tries each row's lock FOR UPDATE SKIP LOCKED
// within the limits left, so lost rows are replaced by the next-best due
// jobs of any priority or kind; when the rows it read ran out it runs
// again with four times as many (claimLostRounds). A claim thus locks the
// rows it returns and no others, and a claim that lost nothing makes one
// round trip. The
// same statement stamps owner, lease_token (gen_random_uuid()), attempt + 1
// and lease_expires_at from the database's now(), returns now(), and takes
// ClaimResult.NextRunAt from its own candidates (each range fetched more
// than it can give, or all it had), without scanning the claim index a
// second time from the start of each range, where the dead entries of
// claimed rows gather while a long transaction holds back vacuum.
//
// Two claims need less (claimopen.go). A claim of one kind takes its jobs
// in the order of its three ranges, one after the other: each range's
// index scan runs under FOR UPDATE SKIP LOCKED and the claim's LIMIT, so
// PostgreSQL locks rows one at a time in claim order, steps over those
// other claims hold or took, and stops at the limit, with no candidates
// and no second round; each range's first row not taken then gives
// NextRunAt and the cursor. With priority aging that order holds unless
// an aged job waits in a range behind another with due jobs: the
// statement checks that first (one-row index probes), and when it is so
// takes nothing and says so, and the Store makes the open claim instead,
// and makes it at once for that kind's claims for the next second
// (agedmixed.go). A claim of several kinds none of whose limits binds
// (each may take the whole Limit) locks its candidates the same way, in
// claim order under the LIMIT, cut at the first range that may have more
// rows than it read; it reads spare rows per range, as many as the claims
// beside it made it step over, and needs the second round only when they
// were not enough. Hosts that claim the same kinds at once
// otherwise meet on the same first rows: with four hosts, four claims in
// five lost rows and ran the second round.
//
// "Due" there is run_at <= now() + ClaimParams.Ahead: the plain claim
// takes jobs a few milliseconds before they fall due, with attempted_at =
// run_at, and returns clock_timestamp() read as it produces its rows, so
// that the runtime holds each job until its run_at without starting it
// early by this server's clock (ClaimResult.Ahead and Clock). The flow
// claim takes due jobs only.
//
// The first scan of each range does not start at the range's start either,
// while a Subscribe is listening: the Store remembers, per (kind,
// priority), where its last claim left the range (the earliest due row it
// did not take, else that claim's now()) and passes it as a lower bound on
// run_at, so a claim steps only over the entries claimed since the last
// one, not over every entry since the horizon was pinned. A job made
// claimable below a cursor always notifies with its run_at in the same
// transaction (insert, retry, snooze, release, rescue, resume, run now,
// follow-ups), and the listener lowers the kind's cursors before anyone
// hears of it; without a listening connection there are no cursors. As a
// safety net for rows changed by hand, every 10 s a claim starts an audit
// beside it: one scan of each of its ranges from the start to the cursor,
// in a goroutine of the Store's (Close waits for it), which lowers a
// cursor to any claimable job it finds below. The claims never wait for
// it: under a held snapshot that scan steps over every entry claimed
// since the horizon was pinned.
//
// Finish writes any number of outcomes in one statement (unnest arrays),
// each row guarded by lease_token and state = 'running', and matched to
// its job on (id, token), so that a zombie's outcome and the current
// holder's for the same job in one call cannot be mixed up; ExtendLeases
// extends all of a host's leases in one statement and reports the lost
// ones, likewise by (id, token). Neither waits on a row another
// transaction holds (FOR UPDATE SKIP LOCKED; a handler's CompleteTx keeps
// its job's row locked until it commits): ExtendLeases leaves such a
// lease unextended, held, not lost; Finish writes the other rows first,
// then that one alone with a statement that waits. A finish keeps the
// lease token in the row (a rescue clears it, records show it only while
// running), so that an extension of that lease reports it finished by its
// holder (store.ExtendResult.Finished) rather than taken over. A claim adds
// one to each job's fence.
//
// Every batched statement (Claim, Finish, ExtendLeases, the keyed Insert
// and its look-up of the keys' holders, RescueExpired, Prune, Archive's
// pick and move, the restore from the history, the flow-controlled kinds'
// claim, Finish and key update) is linear in its batch under any plan: pgx caches
// prepared statements, and after five executions PostgreSQL may run a
// generic plan, costed without the parameters' values. Input rows reach
// jobs only through lateral primary-key probes, tuple IDs, or = ANY(array)
// of primary keys or tuple IDs, each of which leaves the planner one way
// into jobs whatever it believes of the table's size; nothing joins the
// batch with itself on a condition a nested loop would test pairwise (an
// earlier Finish did, and its generic plan removed 999,000 rows in a join
// filter for 1,000 outcomes). A plain join of the batch with jobs on the
// primary key is not enough: once autoanalyze has sampled a drained queue
// (every job of a burst finished, its pages not yet vacuumed), the
// statistics call jobs empty however many pages it has, and the planner
// may put jobs outside the join and scan all of it once per input row
// (an axbench run of 1,000 workers right after one of 100 stalled every
// outcome for 12 to 30 s on such a Finish; the open claim's lock step
// was the same). The lateral probes that must not be pulled up into a
// join carry FOR UPDATE or OFFSET 0. TestGenericPlansAreLinear checks each
// statement with plan_cache_mode = force_generic_plan at 100 and 1,000
// rows, on statistics that predate the live jobs and on statistics of a
// drained queue.
//
// On Citus each shard's worker plans the statements it is sent for their
// values, and shard, which leads the primary key and every unique index
// of a distributed schema, adds a way in: shard = <value>, which every
// row of the shard meets, is an index condition of its own, and a worker
// whose statistics call the shard empty reads the whole shard through
// it. So the Citus store's per-shard statements find rows given by ID
// with a probe per ID (shard and ID, both equalities), and its UPDATEs
// and DELETEs reach them by tuple ID with the shard named in a form
// Citus routes by but no index holds (shard = <value>::numeric).
// TestCitusPlansAreLinear reads each statement's plan on the worker, as
// Citus sends it, on a shard with stale and with drained statistics.
//
// The flow-controlled kinds' claim, the read of what it left and their
// Finish run with JIT compilation off for their transaction
// (set_config('jit', 'off', true), sent in the same round trip): their
// plans' estimated cost grows with the table's statistics, and once a
// large queue had been analyzed it passed every JIT threshold, so that
// each claim spent 1.7–2 s in LLVM for a statement that runs in under a
// millisecond. The plain statements run as the session is set up: their
// plans are LIMITs and primary-key probes, and in one hand-run
// measurement (2026-12-01: the plans test's statements on 30,000 analyzed
// due and running jobs, not kept as a test) the highest estimate was the
// rescue's 4,004, against jit_above_cost's 100,000; a much larger table
// would raise it. TestFlowStatementsRunWithoutJIT checks the flow
// statements on sessions that compile everything.
//
// Pausing a running job only sets pause_requested; Finish and
// RescueExpired read it when the attempt ends and write paused instead of
// retrying or scheduled (a requested cancel still wins). Inserts of one job take one round trip; several jobs go in one
// transaction, through COPY for rows without a unique key.
//
// The jobs table gets aggressive autovacuum settings (vacuum after 2% of
// rows change) and fillfactor 50 (migration 0015; 85 before): it is a
// queue whose rows are updated several times and then leave it, and the
// room left on each page keeps a claim's new row version on its page (no
// Heap/LOCK record for moving it, about 60 bytes of WAL per job) and
// lease extensions HOT.
//
// # Results, follow-ups and batches
//
// Migration 0006 adds result (json, kept byte for byte), follow_ups
// (templates), parent and batch_id to jobs, and a batches table. A Finish
// row with a Result or Then jobs runs in a transaction: Finish's own
// statement applies the outcomes, then the results of the rows whose lease
// matched are written and the Then jobs of their successes inserted.
// CompleteTx does the same inside the caller's transaction, fenced by the
// lease token: a job's success and the handler's writes commit together,
// and a stale owner's call returns false, writing nothing.
//
// What a job's end sets off is done by triggers on jobs, so that every
// statement that ends a job (Finish, RescueExpired, cancels, and any
// written later) does it in its own transaction without knowing of it:
//
//	jobs_state_changed     row trigger, only on rows that change state and carry
//	                       follow-ups or a batch: inserts the follow-ups for the
//	                       final state reached (UUIDv7 made by ax_uuidv7), and
//	                       notes a batch child's end (or reopening) in batch_ends
//	jobs_flush_batch_ends  statement trigger: applies the statement's batch_ends
//	                       to batches, one UPDATE per batch in batch ID order
//	                       (no deadlock between two statements); the flush that
//	                       leaves no child open inserts the completion job
//
// The statement trigger runs after every statement that sets state
// (claims and finishes too) and returns at once when no batch child
// changed: about 30 µs per statement (EXPLAIN ANALYZE), after about 2 ms
// once per connection to compile it.
//
// Counting once per statement rather than once per child keeps the batch
// row from being updated, and held locked, once per child: with 100
// workers, no-op batch children run at 75–100% of the rate of plain jobs
// on a shared 2-core machine (4,700 against 6,300 jobs/s in the worst run;
// 1,800 when every end updated the batch row). The batch row's lock
// orders concurrent flushes, so exactly one sees the last child end, and
// the completion job (its ID fixed at InsertBatch) is inserted once, with
// a notification. A statement that takes a child of a completed batch out
// of its final state (RunNow) reopens the batch (migration 0017), and the
// flush that closes it again inserts the completion job again, under a
// fresh ID (store.BatchStore); completion jobs have a parent and children
// none, which is how the triggers, BatchChildren and CancelBatch tell them
// apart. A multi-statement transaction that
// ends children of two batches in opposite orders can still deadlock;
// PostgreSQL aborts one, and the scheduler's completer retries it.
//
// InsertBatch inserts children through Insert's own path (one COPY for
// those without a unique key) with batch_id coming from a column default
// that reads the transaction-local setting ax.batch_id: 10,000 children in
// about 0.2 s, 100,000 in 1.5–1.8 s (plain inserts: 0.16–0.18 s and
// 1.0–1.1 s). Batch counts live in the batches row and survive the pruning of the
// children; batch rows are not pruned. FollowUps reads jobs_parent_idx
// (parent, created_at), BatchChildren and CancelBatch jobs_batch_idx
// (batch_id, id), both partial on a non-NULL key.
//
// # Operator API
//
// The Store implements store.JobInspector, store.BulkController,
// store.KindPauser, store.PeriodicController, store.LeaderReader,
// store.DueInspector, store.NonceKeeper, store.RevocationKeeper and
// store.ActivityReader (activity.go: the finished jobs of a window, per
// kind and bucket, for axhttp's charts), so
// ax.Admin, the ax CLI and axhttp work on PostgreSQL as on the other
// stores. Migration 0005 adds
// what they need: the kind_states and nonces tables, the periodic table's
// paused and job_template columns (json, so a template's payload comes
// back byte for byte), and two partial indexes for listings of dead
// letters:
//
//	jobs_failed_list_idx      (state, id)       WHERE state IN ('dead', 'cancelled')
//	jobs_failed_kind_list_idx (kind, state, id) WHERE state IN ('dead', 'cancelled')
//
// They hold dead and cancelled jobs only, so the hot path never writes
// them: claims, heartbeats, retries and successes (most finishes) add no
// entry; a job that dies or is cancelled adds one to each. Migrate builds
// them in its transaction, holding a SHARE lock on jobs (inserts, claims
// and finishes wait) for about as long as a scan of the table takes:
// migrate a large table at a quiet time, or prune it first.
//
// ListJobs orders by ID and splits a filter on states into one branch per
// state (and per kind, when kinds are filtered too), each walking its
// index range from the cursor and stopping after the page, LIMIT n+1; the
// branches are merged. A page of 100 dead jobs among 10,000,000 finished
// ones reads about 107 buffers and takes about 1 ms, the next page from
// its cursor too (TestListOnLargeHistory with AX_LIST_ROWS=10000000, on a
// shared 2-core machine; 2,000,000 rows by default). Succeeded jobs (most
// of a history) and live jobs (few) are listed along the primary key,
// which finds a page of them quickly, without parallel workers, whose
// start alone would cost 20 ms. Filters no index serves (error text,
// metadata, node, a rare kind of succeeded jobs) skip rows along the way;
// listings and counts run in read-only transactions whose statements give
// up after 30 seconds, and take no lock a claim waits for.
//
// Bulk selects at most Limit matching jobs, oldest first, FOR UPDATE SKIP
// LOCKED, and changes them with one statement as Control would; a run-now
// of a dead or cancelled job whose unique key another job has taken
// meanwhile is left alone (each such job is tried under a savepoint). A
// kind's resume and a bulk run-now notify listeners (a resume with an
// empty kind: every host re-reads the paused kinds).
//
// OldestDue is a loose index scan of jobs_claim_idx: a few probes per
// kind, whatever the backlog. RememberNonce is one upsert that also deletes
// up to 100 expired nonces (and expired revocations, kept in the same
// table: Revoke is one upsert, Revocations one primary-key read).
//
// # Kind defaults
//
// The Store implements store.KindDefaulter with the kind_defaults table
// (migration 0010): one row per kind, upserted by the hosts that handle
// it at their start, read by a host that schedules a kind it does not
// handle. Only those two calls touch it; jobs keep their own max_attempts
// and priority, so no claim, finish or rescue reads it.
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
// scheduler's next poll. A connection that goes quiet for 10 seconds must
// answer a query within 5: one whose peer vanished without closing it is
// found out within 15 seconds, not the kernel's TCP timeouts.
//
// # Connections
//
// A Store runs on the pool it is given, the application's, and opens two
// connections of its own beside it, each with the pool's connection
// settings (through the same address: a pooler in front of the server
// sees them as clients too):
//
//   - The listener's (see Notifications), while anyone subscribes (a
//     started Scheduler does): one connection, to the server named by
//     WithListenerConnString if given; none with WithTransactionPooler
//     alone (polling only).
//   - The lease connection (leaseconn.go), for ExtendLeases alone: opened
//     at the first extension (a Scheduler's first heartbeat with a job
//     running), kept, opened again when it breaks (a call that finds it
//     dead runs on a new one, so a killed backend costs no heartbeat) or
//     outlives the pool's MaxConnLifetime, closed by Close. The pool's query execution mode, BeforeConnect and
//     AfterConnect hooks apply to it as to the pool's connections, so it
//     works through a transaction pooler with the pool's
//     QueryExecModeCacheDescribe (through PgBouncer it holds a server
//     connection only while an extension runs). The Schedulers sharing
//     one Store take turns on it, one extension statement each. When it
//     cannot be opened (max_connections reached), the extension runs on
//     the pool.
//
// So a host with one Store uses at most the pool's MaxConns + 2 server
// connections on a direct pool; behind a transaction pooler, MaxConns + 1
// client connections of the pooler's (which takes a server connection
// per transaction) and the listener's direct one, if any.
//
// Why the lease connection: handlers use the same pool (through
// ScheduleTx, CompleteTx, or their own queries), and pgxpool hands out
// connections in the order they were asked for. With Workers far above
// the pool size (ax's default of 100 against pgxpool's default of
// max(4, number of CPUs)), the heartbeat waited behind the handlers, timed
// out beat after beat ("pgstore: extend leases: context deadline
// exceeded"), and after a lease the host cancelled its own jobs as lost
// and they ran again elsewhere. Now no pool size costs a lease.
//
// Pool size still matters for speed: claims, outcome writes, rescues,
// inserts and the node and leader heartbeats run on the pool, and wait
// behind handlers holding it, so a host whose handlers keep every
// connection claims and writes outcomes late (the leases of jobs whose
// outcomes wait are kept by the heartbeat; a node or leader heartbeat that
// times out costs no job). Give the pool the connections your handlers
// hold at once (at most Workers of them, fewer when only some kinds use
// the database or hold a connection briefly) plus about 3 for the
// scheduler: cfg.MaxConns = handlersUsingTheDatabase + 3 (or
// pool_max_conns in the connection string). Within PostgreSQL's
// max_connections across all hosts, or the pooler's limits.
//
// A transaction of the caller's costs exactly one connection of the pool:
// the one it holds. InsertTx, InsertBatchTx and CompleteTx run every
// statement on tx, reads included (the flow-controlled kinds, the day
// partitions of the history), and the reads the ax package makes while
// such a transaction is open (the kinds' stored defaults, the node
// registry for Config.RefuseUnknownKinds) run on tx too, through InTx
// (store.TxReader): ax.ScheduleTx, ScheduleManyTx, ScheduleBatchTx,
// CompleteTx, their generic forms and EnqueueTx, EnqueueManyTx. ax.Then,
// which a handler may call with its transaction open, makes no store call
// at all. None of them waits for a second connection, which a pool whose
// every connection is held by request transactions would never free: a
// pool of one connection serves a caller's transaction and everything
// scheduled or completed in it. Such reads see tx's snapshot, and a
// failed one aborts tx like any statement of it. The guard is
// internal/e2e/onetx_test.go: it runs every exported API that takes a
// transaction on a pool of one connection and fails on any second
// acquire, and fails when a new such API is not in its tables.
//
// # What a Store keeps in memory
//
// The database is the only source of truth; a Store keeps four things of
// its own to save work, each with what it relies on and what bounds its
// staleness:
//
//   - Claim cursors (cursor.go): where each (kind, priority) range scan of
//     jobs_claim_idx starts. They rely on every write that makes a job
//     claimable below a cursor notifying in its transaction, and hold only
//     while the listener listens (off before the first LISTEN, after a
//     lost or unanswering connection, reset on a kind's resume and on an
//     unreadable notification). This process's own writes lower them
//     before they return, and an insert holds them down until it commits.
//     A write that notifies nothing (an operator's UPDATE) is found by the
//     audit every 10 seconds, which runs when a claim starts.
//   - Flow settings (flow.go): which kinds have flow settings or
//     sequences, read at most once a second; this Store's own SetFlows and
//     sequenced inserts refresh it at once. Other hosts' new settings
//     apply here within a second; claims of a kind newly under a limit
//     meanwhile take the plain path, which a trigger keeps from starting
//     the kind's sequenced jobs out of turn, and finishes of a kind whose
//     breaker is new to this Store do not feed that breaker.
//   - History partitions and the archive position (history.go): the day
//     partitions known to exist (forgotten on any archive error, so a
//     partition another host's Prune dropped is created again) and where
//     the next archive pass walks from. A pass looks back 10 seconds, a
//     sweep every minute 2 minutes, a Store's first pass the whole index:
//     a job whose finish committed later than that after its finished_at
//     waits for a Store's start or Prune (reads see it all the same).
//   - The listener's subscribers, and the probe interval above.
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
// and MaxPending) or that have sequences take the flow path. Priority
// aging (ClaimParams.AgeAfter, on by default in ax.Config) is applied by
// both paths, so it alone does not move a claim to the flow path.
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
// CompleteTx runs in the caller's transaction, which may stay open long
// after the call: locking a kind's row there would make every claim of the
// kind, on every host, wait for it. So an outcome of CompleteTx that
// changes its breaker is appended to flow_breaker_verdicts (migration
// 0011), which takes no lock anyone waits for, and is dropped with a
// rollback. Whoever next holds the kind's row to decide with the breaker
// folds the committed verdicts in, in their order, at its clock, deletes
// exactly those rows and reports the transitions: a claim (a claim in one
// round trip starts nothing of a kind with a breaker while verdicts wait,
// and the claim decided in Go folds them), or a FinishFlow that feeds the
// breaker (its fast path is not taken while verdicts wait). Until then
// Flows shows the breaker without them. SetBreaker by hand, and SetFlows
// removing the breaker, discard them.
//
// Partition breakers (store.PartitionBreakerStore, migration 0019) keep
// one row per failing partition in flow_partition_breakers (open,
// half-open, or closed counting failures in a row; a breaker that closes
// with no failure counted is deleted; Prune deletes the closed ones of
// partitions with no job scheduled, retrying or running), read and
// written only under the kind's flows row (Prune's delete aside: racing a
// Finish, it can only lose the count of a partition with no job left). A claim of a kind with partition breakers is always
// decided in Go: with the row held it reads the partitions whose breaker
// is not closed, and the claim statement starts none of an open
// partition's jobs before its cool-down ends and at most one (the probe,
// while none of the partition runs) after it, storing the half-open
// breaker when it takes one. The finish statement returns the applied
// rows' partition keys and the breakers of their partitions as it saw
// them: a success in a partition without a breaker changes nothing and
// commits without the kind's row; a failure, or an outcome in a failing
// partition, locks it and feeds the partition's breaker. The end of a
// running job of a partition whose breaker is not closed notifies the
// kind's listeners. Outcomes of CompleteTx do not feed partition breakers
// (feeding them would hold the kind's row until the caller commits).
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
// their rows in flight. Batch children count like any insert (a batch
// that would pass a bound is refused whole, with a *store.PendingLimitError);
// jobs the store inserts itself (periodic ticks, follow-ups, Then jobs,
// batch completions) are not counted.
//
// A partitioned kind's keys are found by skipping through
// jobs_partition_idx, one probe per key, and each partition's jobs are
// read through its own entries there; the partition "" (jobs without a
// key, marked unkeyed, migration 0020) through jobs_unkeyed_idx. So a
// claim reads no other partition's jobs, and a partition whose slots are
// full costs the others nothing however deep its backlog grows
// (TestFlowClaimReadsNoHeldBacklog, BenchmarkFlowClaimBesideHeldBacklog).
// A job written without the mark (by older code during a rolling
// deploy, or before its kind got a source) is marked by the flow claim's
// sweep at a Store's first claim of the kind and then every 5 seconds to
// a minute (less often while sweeps find none), so it starts at most a
// minute late (unkeyed.go).
//
// Partition keys are derived at insert from the kind's PartitionSource as
// the Store last read it (store.PartitionKeyOf) and written with the row,
// by every way a job is inserted: Insert, InsertTx, the COPY of many rows,
// batch children and periodic ticks (partitionkeys.go, in Go), and the
// jobs the database inserts from templates, follow-ups, Then jobs and
// batch completions (ax_partition_key, migration 0016, the same rule in
// SQL over the settings as they are then; a key the rule would refuse
// puts such a job in the partition "" rather than fail the statement that
// ends its parent). The conformance area FlowPartitionPaths runs every
// path with every kind of key. Jobs inserted before a kind got a source
// stay in the partition "". A host that has not yet
// learnt of a kind's new settings (up to a second) claims it the plain
// way, without its limits; jobs of a sequence are safe meanwhile, since a
// trigger lets only the flow claim start them.
//
// # Poolers
//
// Through a pooler in transaction mode (PgBouncer's pool_mode =
// transaction), give New WithTransactionPooler and build the pool with
// pgx.QueryExecModeCacheDescribe (named prepared statements do not survive
// a change of server connection), and give the listener a direct
// connection with WithListenerConnString, or none: the Store then polls
// (see WithTransactionPooler). internal/deploytest runs the conformance
// suite, the model test and a cluster of hosts through PgBouncer 1.18.
//
// No other state of pgstore's outlives a transaction, so a pooled server
// connection that served another client serves the Store as a fresh one
// (grep for SET, set_config, advisory, TEMP and LISTEN finds each of these):
//
//   - Settings: every one is set with set_config(name, value, true) or SET
//     LOCAL, for its transaction: ax.batch_id (InsertBatch), ax.batch_ends
//     (the batch triggers), statement_timeout (Bulk, listings),
//     max_parallel_workers_per_gather (listings), plan_cache_mode and jit
//     (the plain claim, and Finish and FinishFlow outside a caller's
//     transaction, each in its batch's implicit transaction; FinishFlow
//     turns jit off inside one too), ax.flow_claim, ax.flow_now,
//     plan_cache_mode, synchronous_commit and jit (the flow claim),
//     synchronous_commit (the plain claim, Finish and FinishFlow with
//     WithAsyncClaimsAndOutcomes; a direct start's insert with
//     WithEarlyDirectStart), enable_bitmapscan, enable_seqscan,
//     plan_cache_mode and jit (RescueExpired, in its batch's implicit
//     transaction), lock_timeout (history partitions' DDL),
//     search_path (Migrate, MigrateCitus), citus.multi_shard_modify_mode
//     and citus.shard_count (MigrateCitus). A custom setting a session has seen reads as
//     the empty string after the transaction that set it, not NULL; every
//     reader takes the empty string as unset. The functions' SET
//     search_path FROM CURRENT holds for the call.
//   - Advisory locks: transaction-level only (pg_advisory_xact_lock for
//     Migrate and MigrateCitus, history partitions and Bulk against Archive;
//     pg_try_advisory_xact_lock_shared for Archive), released at commit.
//   - Temporary tables: none. batch_ends is an ordinary unlogged table
//     whose rows live within the statement that writes them.
//   - LISTEN: only on the listener's own connection, outside the pool.
//   - The lease connection (see Connections): outside the pool, through
//     the same address, one extension statement at a time, no session
//     state.
//   - Prepared statements: pgx's, per the pool's query execution mode.
package pgstore
