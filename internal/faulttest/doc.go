// Package faulttest is AX's fault-injection suite: real worker processes
// (internal/faulttest/worker, built by the tests) on one real PostgreSQL
// database, killed, paused, cut off, skewed and stopped while they run
// jobs. Every execution is recorded in an executions table, so the tests
// count what ran where and when. TestRollingKeyRotation restarts the
// workers one at a time with a new encryption key ring (-keys) while they
// schedule and run sealed jobs, in one phase and in the documented two.
//
// The default run takes about two and a half minutes (the scenarios
// without tight time bounds run two at a time: sideBySide); AX_SOAK=1
// adds longer variants (the kill scenario with the default lease and
// leader TTL, 60+ periodic ticks, a larger steady state). PostgreSQL comes from TEST_DATABASE_URL,
// as for internal/pgtest; without a server the tests skip.
package faulttest
