// Package deploytest runs AX the way it is deployed, with real processes
// started by the tests: a primary failover (the test's own PostgreSQL
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
