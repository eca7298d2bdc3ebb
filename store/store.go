// Package store is the contract between AX and the databases it keeps jobs
// in: the Store interface, the job record, the job State machine, parameter
// structs and the errors a Store returns. It is to AX what database/sql/driver
// is to database/sql: it imports nothing of AX, and a user can implement it.
//
// store/memstore is the in-memory implementation (tests, examples, single
// process); store/pgstore is the PostgreSQL one. store/storetest is the
// conformance suite every implementation must pass.
//
// # Clock
//
// Every time a Store compares or stamps (due-ness, leases, created and
// finished times, retry delays) is taken from the store's own clock, never
// the caller's, so hosts with wrong clocks cannot fire jobs early or twice.
//
// # Leases
//
// A claim stamps each job with a fresh random lease token and an expiry.
// Finish and ExtendLeases act only on rows whose token still matches, so a
// stale owner (a paused VM, a partitioned host) changes nothing once its
// lease was rescued and re-claimed:
//
//	claim ──▶ held ──ExtendLeases──▶ held (expiry pushed)
//	            │ Finish(token)        ──▶ released (job leaves running)
//	            │ expiry passes        ──▶ RescueExpired ──▶ lost (retrying or dead)
//	            │ cancel requested     ──▶ reported by ExtendLeases; the owner finishes it as cancelled
//
// Optional abilities are separate interfaces found by type assertion:
// Notifier, Pruner, Archiver, Lister, Counter, Closer.
// PeriodicStore keeps periodic schedules' last fired ticks (periodic.go).
// FlowStore applies flow control across the cluster: concurrency and rate
// limits, circuit breakers, pending bounds, sequences and priority aging
// (flow.go).
package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Store keeps jobs. All methods are safe for concurrent use by many
// goroutines and many processes sharing the same backing database. Each
// method either fully applies or changes nothing.
type Store interface {
	// Insert inserts jobs atomically: every row is validated first
	// (InsertParams.Validate) and an invalid one fails the whole call with
	// ErrInvalidParams. A row whose UniqueKey is held in its scope (see
	// UniqueScope) by another job (in the store or earlier in the same
	// call) is not inserted; its result carries the holder's ID and
	// Duplicate = true. An ID that already exists fails the call with
	// ErrInvalidParams. Results are in the order of params; an empty
	// params inserts nothing and returns no error.
	Insert(ctx context.Context, params []InsertParams) ([]InsertResult, error)

	// Claim atomically moves up to params.Limit due jobs (claimable state,
	// run_at <= store now) of the given kinds to running, strictly by
	// priority then run_at, honouring each kind's limit. Each claimed job
	// gets Owner, a fresh LeaseToken, LeaseExpiresAt = now +
	// LeaseDuration, AttemptedAt = now and Attempt + 1. No job is ever
	// returned to two concurrent claimers. Empty Kinds claims nothing. A
	// store may honour params.Ahead (jobs due within it are claimed too,
	// with AttemptedAt = run_at) and says so in ClaimResult.Ahead.
	Claim(ctx context.Context, params *ClaimParams) (*ClaimResult, error)

	// ExtendLeases pushes the expiry of every still-held lease to store now
	// + Duration, in one operation, and reports the ones that are lost. A
	// lease is held while the job is running with its token, even past its
	// expiry: it is lost only once RescueExpired (or a finish) took the job.
	// Of the lost leases, those whose own outcome ended the job are also
	// reported as finished. A store may skip a held lease whose job another
	// transaction holds locked instead of waiting for it (see
	// ExtendResult): an extension never queues behind a user's transaction.
	ExtendLeases(ctx context.Context, params *ExtendParams) (*ExtendResult, error)

	// Finish records attempt outcomes, in one operation. ok[i] reports
	// whether params[i] was applied; it is false when the lease is no
	// longer held (stale token: the job was rescued, re-claimed, finished
	// or pruned), and then nothing changed for that job. For a job whose
	// cancel was requested, retry, snooze and release become cancelled
	// (attempt kept); for a job whose pause was requested, they become
	// paused (run_at and attempt as the outcome sets them). A row that
	// FinishParams.Validate refuses, or that the database cannot store,
	// fails the whole call with an error wrapping ErrInvalidParams, so that
	// callers never retry it as they would a transient failure.
	Finish(ctx context.Context, params []FinishParams) (ok []bool, err error)

	// Get returns the job with the given ID, or ErrNotFound.
	Get(ctx context.Context, id uuid.UUID) (*JobRecord, error)

	// Control applies a user's operation (see ControlOp for the
	// transitions) and returns the job as it is afterwards. It returns
	// ErrNotFound or ErrWrongState (ErrInvalidParams for an unknown op),
	// changing nothing, when it cannot.
	Control(ctx context.Context, id uuid.UUID, op ControlOp) (*JobRecord, error)

	// RescueExpired takes back at most limit running jobs whose lease
	// expired before store now: to retrying (due now) while attempts
	// remain, otherwise to dead, recording a "lease expired" error; a job
	// whose cancel was requested goes to cancelled instead, and one whose
	// pause was requested to paused (due now) while attempts remain. It is
	// one atomic, idempotent operation, safe for every host to run at
	// once: concurrent callers rescue disjoint jobs. It returns the jobs
	// it rescued; limit < 1 is ErrInvalidParams.
	RescueExpired(ctx context.Context, limit int) ([]Rescued, error)

	// Now returns the store's clock.
	Now(ctx context.Context) (time.Time, error)
}

// Notification tells listeners that jobs were inserted or made due. A
// Notification with an empty Kind means notifications may have been missed
// (the store's listener reconnected): listeners should re-check the store.
type Notification struct {
	// Kind of the jobs.
	Kind string
	// RunAt is the earliest run_at among them (store clock).
	RunAt time.Time
}

// Notifier is implemented by stores that can push wake-ups to every process
// when jobs are inserted or made due earlier (insert, RunNow, resume,
// retry). Notifications may be coalesced and, rarely, lost; callers still
// poll slowly.
type Notifier interface {
	// Subscribe calls fn for each notification until unsubscribe is
	// called; once it returns, notifications of later changes are
	// delivered. fn must not block. Unsubscribe is safe to call more than
	// once and waits until fn is no longer running, so it must not be
	// called from fn.
	Subscribe(fn func(Notification)) (unsubscribe func())
}

// Archiver is implemented by stores that keep finished jobs apart from the
// live ones, so that the tables the claim, finish and rescue paths use stay
// small however long the history grows. Reads (Get, listings, counts)
// see archived jobs as before.
type Archiver interface {
	// Archive moves up to limit finished jobs to the history and returns
	// how many it moved. Every host may call it at once.
	Archive(ctx context.Context, limit int) (int, error)
}

// PruneParams selects finished jobs to delete.
type PruneParams struct {
	// Retention keeps final jobs whose FinishedAt is within Retention of
	// store now.
	Retention time.Duration
	// Limit caps the rows deleted in one call (> 0).
	Limit int
}

// Pruner is implemented by stores that can delete old final jobs.
type Pruner interface {
	// Prune deletes up to Limit jobs in a final state that finished more
	// than Retention ago and returns how many it deleted.
	Prune(ctx context.Context, params *PruneParams) (int, error)
}

// ListParams selects jobs to list.
type ListParams struct {
	// Kind filters by kind when not empty.
	Kind string
	// States filters by state when not empty.
	States []State
	// After returns only jobs whose ID sorts after it (keyset paging).
	After uuid.UUID
	// Limit caps the result (> 0).
	Limit int
}

// Lister is implemented by stores that can list jobs, for operators (dead
// letters, stuck jobs) and tools.
type Lister interface {
	// List returns matching jobs ordered by ID.
	List(ctx context.Context, params *ListParams) ([]*JobRecord, error)
}

// StateCount is the number of jobs of one kind in one state.
type StateCount struct {
	Kind  string `json:"kind"`
	State State  `json:"state"`
	Count int64  `json:"count"`
}

// Counter is implemented by stores that can count jobs by kind and state
// cheaply.
type Counter interface {
	// CountJobs returns non-zero counts by kind and state. Counts may be
	// estimates on large tables.
	CountJobs(ctx context.Context) ([]StateCount, error)
}

// Closer is implemented by stores holding resources (connections,
// goroutines) released by Close.
type Closer interface {
	Close() error
}
