// Package e2e holds end-to-end tests of the Scheduler on PostgreSQL: many
// schedulers sharing one database, transactional scheduling, wake-up
// latency. The tests skip without a server unless AX_REQUIRE_POSTGRES=1
// (see internal/pgtest).
package e2e
