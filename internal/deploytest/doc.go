// Package deploytest runs AX in the deployments it meets in production, the
// pieces between the hosts and the database included, each as a real
// scenario with real processes started by the test itself from Debian's
// packages. Where internal/faulttest breaks a single server and AX's own
// processes, this suite checks that what the README promises still holds
// behind those pieces. Every scenario prints its figures (jobs scheduled,
// run, lost, run twice, and what it measures besides) as lines starting
// with FIGURE (go test -v), and fails on a lost job or a double run.
//
// PgBouncer (files bouncer_*.go): a pgbouncer process (Debian's package,
// 1.18 in Debian 12) with pool_mode = transaction, started on a free port
// of 127.0.0.1 in front of the test server with a configuration written to
// the test's temporary directory (auth_type = any with the server's user
// forced, as the test server trusts it), and only 6 server connections,
// fewer than the pools in front of it, so consecutive transactions of one
// client land on different server connections. Through it run:
//
//   - the storetest conformance suite and the model-based test
//     (storetest.RunModel), on stores whose pool goes through PgBouncer
//     (pgx.QueryExecModeCacheDescribe, pgstore.WithTransactionPooler);
//   - a cluster of three hosts and a client: Schedule and ScheduleTx (one
//     rolled back), CompleteTx writing a ledger row, a kind under a
//     cluster-wide concurrency limit, a periodic schedule declared by
//     every host, and the operator API (pause and resume a kind, cancel,
//     count, list, nodes, stats); once with the listener on a direct
//     connection (pgstore.WithListenerConnString), once with no direct
//     connection at all (polling only);
//   - a regression test for the polling-only Store, which used to LISTEN
//     through the pooler and trust a deaf listener;
//   - pgstore's lease connection through the pooler: 40 workers on a
//     2-connection pool whose handlers hold it lose no lease, and no
//     extension is refused by the pooler.
//
// The tests skip when pgbouncer is not installed (apt-get install
// pgbouncer), and fail instead with AX_REQUIRE_PGBOUNCER=1, as in CI
// (.ci/run installs it). AX_BOUNCER_MODE=statement runs them with pgx's
// default query execution mode, to see what breaks (pgstore refuses it
// with WithTransactionPooler, which the conformance run then leaves out;
// Exec and SimpleProtocol New refuses outright). PostgreSQL comes from
// TEST_DATABASE_URL, as for internal/pgtest, and must be given as a URL.
//
// Failover and rolling upgrade (files failover_*.go, upgrade_*.go): a primary failover (the test's own PostgreSQL
// primary and streaming standby, promoted and stopped while three worker
// hosts run jobs through a multi-host connection string) and a rolling
// upgrade (hosts of the previous release, built from the commit
// CHANGELOG.md names, beside hosts of this tree while its migrations are
// applied). The hosts are internal/faulttest/worker; jobs come from
// loader, which prints every job whose Schedule returned.
//
// Each scenario prints its figures (go test -v, lines starting with
// FIGURE) and fails on a lost job or a double run. The servers need
// PostgreSQL's programs (AX_PG_BIN, /usr/lib/postgresql/15/bin or
// pg_config's bindir; as root they run as the postgres user), the upgrade
// needs the git history (a shallow clone skips it), and the executions
// are recorded on the TEST_DATABASE_URL server; without them the tests
// skip, or fail under AX_REQUIRE_POSTGRES=1 (CI, which clones the whole
// history). AX_SOAK=1 runs longer variants. The scenarios take 45-90 s
// each; building the previous release adds a few seconds with a warm Go
// build cache and a few minutes with a cold one (its dependencies are
// downloaded and compiled once). Under -race the scenarios skip: their
// processes are built without it, and go test ./... runs them.
package deploytest
