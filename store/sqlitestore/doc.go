// Package sqlitestore is a durable store.Store of AX in one SQLite file, on
// modernc.org/sqlite (pure Go: no cgo, no server). It is the embedded store
// for a single process that must not lose its jobs: a job exists on disk
// once Insert returns, and survives crashes and restarts. It implements
// the optional interfaces of package store, flow control (store.FlowStore)
// included, but for the two optimizations store.InsertClaimer and
// store.Archiver, and passes the conformance suite (store/storetest).
//
// # Usage
//
//	st, err := sqlitestore.Open(ctx, "jobs.db") // creates and migrates the file
//	...
//	defer st.Close()
//	s, err := ax.New(ax.Config{Store: st})
//
// Jobs inserted together with business writes, in one transaction on the
// same file (see InsertTx and DB):
//
//	tx, err := st.DB().BeginTx(ctx, nil)
//	... // business writes
//	res, err := st.InsertTx(ctx, tx, []store.InsertParams{...})
//	err = tx.Commit()
//
// ax.ScheduleTxOf and, in a handler, ax.CompleteTxOf (CompleteTx: the
// job's success commits with the handler's writes) take such a *sql.Tx;
// register such a handler with ax.CompletesInTx[*sql.Tx]() (a pgx.Tx is
// refused at Handle).
// OpenReadOnly reads a file beside the process that holds it (the ax
// command does).
//
// # One process
//
// A file serves one Store at a time. Open takes an exclusive flock on
// path+".lock" for the Store's life, so a second Open of the file, by the
// same process or another, fails at once with an error wrapping ErrLocked
// that names the holder's process ID; the kernel drops the lock when the
// holder dies, however it dies, so a crash leaves no stale lock. Because
// the lock proves that whoever ran the jobs left running in the file is
// gone, Open makes their leases expire at once: the first RescueExpired
// takes them back, as it would after a host's death.
//
// Several processes therefore cannot share a file; use store/pgstore for a
// cluster. On platforms without flock (Windows, Plan 9, Solaris, AIX) there
// is no lock: two processes on one file would still never claim a job
// twice (each claim is a serializable SQLite write transaction), but they
// would see each other's jobs only by polling (notifications are
// in-process), compare leases with two host clocks, wait on each other's
// writes under the busy timeout and fail with SQLITE_BUSY past it, and the
// second Open would expire the first one's leases. Do not do that.
//
// # Concurrency model
//
// SQLite serializes writers, so the Store has one writer connection (a
// database/sql pool of one) and every write is one BEGIN IMMEDIATE
// transaction on it: Insert, Claim, ExtendLeases, Finish, Control,
// RescueExpired, Prune, Bulk and the rest each take the write lock at
// BEGIN, read the store's clock once they hold it, and commit or roll back
// whole. Concurrent callers queue for the connection in the pool, so
// claims never contend (no SKIP LOCKED is needed: one claim runs at a
// time) and a claim, a finish and a rescue of the same job are serialized.
// Reads that need no write lock (Get, List, ListJobs, CountMatching,
// CountJobs, OldestDue, the batch, follow-up, periodic, node, kind and
// leader readers) run on a pool of read-only connections (WithReaders,
// default 4), which in WAL mode never wait for the writer nor make it
// wait. Statements are prepared once per connection.
//
// Notifications (store.Notifier) are in-process: the Store delivers them
// to its subscribers after the transaction that caused them committed, on
// the calling goroutine. The Store starts no goroutine of its own
// (database/sql's are stopped by Close).
//
// # Flow control
//
// The flow options (GlobalConcurrency, PartitionBy, RateLimit,
// CircuitBreaker, PartitionBreaker, MaxPending, Sequential,
// Config.PriorityAging) are
// applied inside the claim's, finish's and insert's write transaction, by
// the rules memstore follows (store.FlowStore). A claim of kinds without
// flow settings or sequences, and without priority aging, is the plain
// one above; otherwise it reads the kinds' claimable rows in claim order
// a page at a time, stepping over those a full partition or a sequence
// holds back, so it costs at most the kinds' due rows (a partition with
// a long backlog and a low limit makes claims of its kind read that
// backlog). Running jobs are counted from the counts table and the
// jobs_running index, sequences read from jobs_sequence (migration
// 0003).
//
// # Clock
//
// The store's clock is the host's: time.Now, read once per transaction
// after the write lock is taken, at microsecond precision (like
// PostgreSQL's timestamptz), in UTC. Within a Store it never goes back: a
// reading earlier than the last one (the host's clock was set back) is
// replaced by the last one. Across restarts it is whatever the host says:
// a clock set back by an hour makes due jobs wait an hour and leases last
// an hour longer. WithClock replaces it, for tests.
//
// # Layout
//
// Migrations are embedded .sql files applied by Open in one transaction
// and recorded in PRAGMA user_version (a file migrated by a newer version
// of this package is refused with ErrSchemaTooNew). Times are INTEGER
// microseconds since the Unix epoch; UUIDs are 16-byte BLOBs, whose order
// is the UUIDs' byte order (creation order for UUIDv7); payloads, results,
// metadata, attempt errors and job templates are TEXT, payloads and
// results kept byte for byte as given (templates keep their payloads as
// JSON strings, so they come back byte for byte too).
//
//	jobs      one row per job (rowid seq: insertion order), with the indexes
//	  jobs_claim    (kind, priority, run_at, id) WHERE state IN ('scheduled', 'retrying')
//	  jobs_ukey     UNIQUE (ukey) WHERE the row holds its unique key (see Insert)
//	  jobs_lease    (lease_expires_at, id) WHERE state = 'running'
//	  jobs_finished (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled')
//	  jobs_parent   (parent, seq), jobs_batch (batch, id): follow-ups and batch children
//	counts    jobs per (kind, state), kept exact by triggers on jobs
//	batches   a batch's completion template and counters
//	periodic  a schedule's spec, last fired tick, pause and job template
//	leaders, nodes, kinds, nonces
//
// Every hot statement searches the index made for it (TestQueryPlans
// checks the plans): a claim reads, per requested kind and priority, the
// rows it may take from jobs_claim and one more (which gives NextRunAt),
// and updates the claimed rows in one statement, so its cost grows with
// the jobs it claims and the kinds it asks for, not with finished jobs or
// far-future ones. Calls of many rows pass them as one JSON array read
// with json_each, so that their statements do not grow with the rows:
// Insert writes the rows without a unique key that way (keyed rows go one
// statement each, in order), a claim updates its jobs, Finish reads the
// jobs it names and writes their ends, ExtendLeases extends its leases,
// each row found through an index: a call with n rows costs O(n log n),
// never O(n²). CountJobs reads the counts table.
// ListJobs, Bulk and CountMatching with filters beyond kinds and states
// walk jobs in ID order and skip those the filter rejects, as memstore
// does.
//
// # Durability and limits
//
// The file is in WAL mode with synchronous = FULL: a commit is on disk
// when it returns, so Insert returning means the job survives a power
// loss. WithSyncNormal trades that for speed (a commit then survives a
// crash of the process but not of the machine). Each state change
// rewrites the job's row, payload included: SQLite has no partial row
// update, so a store of many megabyte-sized payloads writes more than one
// of small payloads. Prune frees rows for reuse; the file does not shrink
// (VACUUM it offline). Throughput is bounded by one writer: see the
// README's Performance section for figures beside PostgreSQL's.
package sqlitestore
