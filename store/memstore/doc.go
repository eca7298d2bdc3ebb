// Package memstore is AX's embedded default Store: every job lives in the
// memory of one process, behind one mutex. It is what tests, examples and
// single-process programs use, and it has the same semantics as the
// PostgreSQL store (store/pgstore): the same state machine, unique keys,
// lease fencing, claim order and errors, checked by the same conformance
// suite (store/storetest).
//
// # What it does not give
//
// memstore is not durable. Jobs exist only in the memory of the process that
// created the Store: they are lost when that process exits or crashes, and
// other processes cannot see them. It therefore does not satisfy AX's
// invariant that a job survives any crash once Schedule returns; use
// store/pgstore for that, and for several hosts sharing one queue.
//
// # Clock
//
// The store's clock decides due-ness, leases and every time it stamps
// (CreatedAt, AttemptedAt, FinishedAt, lease expiries, retry times). It is
// time.Now unless WithClock injects another, which lets tests move time by
// hand:
//
//	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
//	st := memstore.New(memstore.WithClock(func() time.Time { return now }))
//
// Like PostgreSQL's timestamptz, the store keeps times at microsecond
// precision: the clock's readings and the RunAt values of inserted jobs are
// truncated to the microsecond (which also drops monotonic clock readings).
//
// # Cost
//
// Claimable jobs are indexed per kind and priority in min-heaps ordered by
// (run_at, ID), running jobs in a heap ordered by lease expiry and final jobs
// in a heap ordered by finish time. Claim, Finish, ExtendLeases, Control,
// RescueExpired and Prune cost O(log n) per job they touch, whatever the
// size of the backlog; CountJobs reads maintained counters. List walks jobs
// in ID order and skips the ones its filters reject.
package memstore
