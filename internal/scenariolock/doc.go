// Package scenariolock keeps the test packages whose scenarios run
// systems of worker processes and servers (internal/deploytest and
// internal/faulttest) from running at the same time on one machine.
//
// go test ./... runs two packages at once, and each of these runs two
// scenarios side by side, each with its worker processes and, for
// deploytest, PostgreSQL servers of its own. When the two packages met,
// eight or more busy processes shared the CI machine's two cores, and
// scenarios with time bounds failed on the load, not on AX: a promoted
// standby that took more than its connect timeout to answer, a periodic
// tick fired 2 s after the one before, a handler's ledger write that
// never came (a local CI run of 2026-12-07 on a slower machine, which
// had passed the run before). Each package's TestMain takes this
// machine-wide lock first, so one waits for the other; the wait counts
// against go test's timeout of the waiting package (each takes about
// three minutes alone, well inside the ten).
package scenariolock
