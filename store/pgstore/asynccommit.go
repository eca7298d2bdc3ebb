package pgstore

// WithAsyncClaimsAndOutcomes makes the Store commit the writes of the
// runtime's hot path, claims and outcomes (Claim, Finish, FinishFlow:
// successes, retries, failures, hand-backs), without waiting for
// PostgreSQL to flush them to disk: synchronous_commit off for those
// transactions only. Everything else keeps the server's setting:
// Schedule's inserts (direct starts included), lease extensions, rescues,
// operator actions, and CompleteTx, which commits as its caller's
// transaction does. So no job is ever lost.
//
// Use it where the commit's flush is what a claim waits for: a disk whose
// fsync takes milliseconds (network volumes, busy disks), short jobs. On
// this project's 2-core test machine with two busy programs beside (a
// WAL flush about 2 ms), 100 workers ran about 1.3 times the no-op jobs
// per second of the default; 1,000 workers, whose claims take hundreds
// of jobs each, gained nothing. With the database 1 ms away and 100
// workers taking jobs ahead, 1.04 and 1.18 times the default's jobs per
// second in two alternating pairs on a quiet machine (2026-12-06).
// PostgreSQL's CPU per job hardly changed, since the flush costs time,
// not work (docs/performance.md).
//
// What it gives up, only when PostgreSQL crashes or fails over to a
// standby: the claims and outcomes of the last moments before it (up to
// three times wal_writer_delay, 600 ms by default) can be lost with the
// server. A job whose outcome was lost is still running under its old
// lease and runs again once the lease expires, as after a host's crash. A
// job whose claim was lost is claimable at once: it can run again while
// its first run goes on, with the same attempt number and fencing token
// (the first run's lease is refused at its next extension, which cancels
// its context). Without this option a claim or a success that a host saw
// written is never undone, even by a failover to a synchronous standby,
// and fencing tokens only grow. A clean shutdown or restart of PostgreSQL
// loses nothing either way.
func WithAsyncClaimsAndOutcomes() Option {
	return optionFunc(func(o *options) { o.asyncCommits = true })
}

// syncOff turns synchronous_commit off until the end of the transaction
// it runs in; the statements that set other settings first append it.
const syncOff = `set_config('synchronous_commit', 'off', true)`
