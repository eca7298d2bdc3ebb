// Package pgstore is the PostgreSQL store.Store of AX, on pgx v5 and
// pgxpool. It also implements store.Notifier (LISTEN/NOTIFY), store.Pruner,
// store.Lister, store.Counter and store.Closer, and adds InsertTx to insert
// jobs inside a transaction of the caller's.
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
// Every hot query rides an index that holds only the rows it can return,
// so its cost does not grow with finished jobs or with far-future ones
// (docs/storage.md has the details and measurements):
//
//	jobs_pkey           (id)                                                  -- every write, by primary key
//	jobs_claim_idx      (kind, priority, run_at) WHERE state IN ('scheduled', 'retrying')
//	jobs_unique_key_idx UNIQUE (unique_key) WHERE unique_key IS NOT NULL AND state <> 'cancelled'
//	jobs_busy_idx       (kind, state) WHERE state IN ('running', 'paused')   -- RescueExpired, CountJobs
//	jobs_finished_idx   (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled') -- Prune
//
// No index holds lease_expires_at (migration 0003 dropped jobs_lease_idx),
// so a lease extension changes no indexed column and can be a HOT update;
// RescueExpired reads the running jobs through jobs_busy_idx and sorts
// them by expiry. State transitions change state, which every partial
// index's predicate reads, so they are never HOT.
//
// A claim is one statement. A naive claim (WHERE run_at <= now() ORDER BY
// priority, run_at LIMIT n) walks, in a (priority, run_at) index, every
// future entry of a higher priority before reaching the due entries of a
// lower one. So the claim is shaped per (kind, priority): unnest($kinds) ×
// unnest('{1,2,3}') CROSS JOIN LATERAL a range scan of jobs_claim_idx in
// run_at order that stops at the first future row or at a quarter more
// rows than the claim could take from the range, plus, when the range ran
// out of due rows, one descent from now() for its first future row. These
// candidates are chosen without locks; they are cut to each kind's limit
// (row_number() over the kind, in claim order), then to the total limit in
// strict priority, run_at order, and only then locked, one primary-key
// probe each, FOR UPDATE SKIP LOCKED with state and run_at re-checked. If
// some were skipped (another claim holds or took them), a second round
// ranks the remaining candidates behind the rows already locked and locks
// those that fit. A claim thus locks the rows it returns and no others. The
// same statement stamps owner, lease_token (gen_random_uuid()), attempt + 1
// and lease_expires_at from the database's now(), returns now(), and takes
// ClaimResult.NextRunAt from its own candidates (each range fetched more
// than it can give, or all it had), without scanning the claim index a
// second time from the start of each range, where the dead entries of
// claimed rows gather while a long transaction holds back vacuum.
//
// Finish writes any number of outcomes in one statement (unnest arrays),
// each row guarded by lease_token and state = 'running', and matched to
// its job on (id, token), so that a zombie's outcome and the current
// holder's for the same job in one call cannot be mixed up; ExtendLeases
// extends all of a host's leases in one statement and reports the lost
// ones, likewise by (id, token). A claim adds one to each job's fence.
//
// Every batched statement (Claim, Finish, ExtendLeases, the keyed Insert,
// RescueExpired, Prune) is linear in its batch under any plan: pgx caches
// prepared statements, and after five executions PostgreSQL may run a
// generic plan, costed without the parameters' values. Input rows reach
// jobs only through lateral primary-key probes, joins on the primary key
// alone, or = ANY(array) of primary keys; nothing joins the batch with
// itself on a condition a nested loop would test pairwise (an earlier
// Finish did, and its generic plan removed 999,000 rows in a join filter
// for 1,000 outcomes). TestGenericPlansAreLinear checks each statement
// with plan_cache_mode = force_generic_plan at 100 and 1,000 rows.
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
// # Poolers
//
// LISTEN needs a session. If the pool goes through a transaction-mode
// pooler such as PgBouncer, give the listener a direct connection to the
// server with WithListenerConnString. Everything else works through such a
// pooler: the Store uses no session state, prepared statements aside (set
// the pool's DefaultQueryExecMode as your pooler requires).
package pgstore
