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
// # What it accepts
//
// memstore keeps Go values and could hold any string, but it accepts only
// what every Store can keep, so that a program tested on memstore does not
// fail on PostgreSQL. Every call checks its params before changing anything
// (InsertParams.Validate, FinishParams.Validate, ClaimParams.Validate,
// NodeParams.Validate, and store.CheckText for the names other calls take)
// and refuses, with an error wrapping store.ErrInvalidParams, text that is
// not valid UTF-8 or holds a NUL byte, oversize kinds, unique keys,
// metadata and error texts, times outside store.MinTime..store.MaxTime and
// MaxAttempts above store.MaxAttemptsLimit. Payloads are kept byte for byte
// as given.
//
// # Pausing a running job
//
// A pause never interrupts an attempt. Pausing a running job sets its
// PauseRequested; when the attempt ends with a retry, snooze or hand-back,
// or its lease is rescued with attempts left, the job becomes paused (with
// the run_at and attempt the outcome set) instead of claimable. A success,
// a dead end or a cancel end as usual, and a requested cancel wins over the
// pause. Resume withdraws the request.
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
// # Flow control
//
// memstore implements store.FlowStore exactly: every rule is applied under
// its one lock, so it is the reference of the contract (concurrency limits
// cluster-wide and per partition, rate buckets, breakers per kind and
// per partition, pending bounds, sequences, priority aging; see
// store.PartitionBreakerStore). Several Schedulers on one memstore behave as
// hosts of a cluster do.
//
// # Cost
//
// Claimable jobs are indexed per kind, partition key and priority in
// min-heaps ordered by (run_at, ID) (kinds without partitions have one
// partition), running jobs in a heap ordered by lease expiry and final jobs
// in a heap ordered by finish time; of a sequence, only the job that may
// run next is in its partition's heaps, the others wait in a heap of the
// sequence ordered by (ScheduledAt, ID). Claim costs O(partitions) per
// job it takes, and Finish, ExtendLeases, Control, RescueExpired and Prune
// O(log n) per job they touch, whatever the size of the backlog; running
// jobs and pending jobs are counted per kind and per partition, so limits
// and pending bounds read counters; CountJobs reads maintained counters, and so does
// CountMatching for filters on kinds and states alone. List, ListJobs,
// Bulk and other CountMatching filters walk jobs in ID order and skip the
// ones their filters reject (a filter on IDs reads only those jobs);
// OldestDue reads the head of each kind's heaps.
package memstore
