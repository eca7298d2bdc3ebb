package store

import (
	"context"
	"fmt"
	"time"
)

// InsertClaimer is implemented by stores that can insert a job already
// claimed by the caller, in one atomic step: the Scheduler's direct start,
// with which Schedule on a host that has a free worker slot for the kind
// starts the job itself, without the claim round trip that would follow
// the insert.
type InsertClaimer interface {
	// InsertClaimed inserts one job exactly as Insert would (same
	// validation, unique keys and results) and, when it may, claims it
	// for claim.Owner in the same step, returning its record as Claim
	// returns a claimed job: running, Attempt 1, a fresh LeaseToken,
	// LeaseExpiresAt = now + claim.LeaseDuration and AttemptedAt = now
	// (the store's clock at the insert).
	//
	// It claims only a plain job that is due at once (no RunAt after the
	// store's now, no Delay, no FollowUps, SequenceKey or PendingLimit) of
	// a kind whose flow settings, as the store knows them, leave inserts
	// and claims to it (FlowConfig.InsertsClaimable), that has no
	// sequences, and of which no other job is due and waiting to be
	// claimed, so that a direct start never overtakes a job a claim
	// would take first. Otherwise, and for a duplicate, the
	// record is nil and the job (if inserted) waits for a claim as after
	// Insert; subscribers are then notified as after Insert. A claimed
	// job notifies no one: no other host can take it.
	//
	// Invalid params or claim fail with an error wrapping ErrInvalidParams
	// and change nothing.
	InsertClaimed(ctx context.Context, params *InsertParams, claim *InsertClaim) (InsertResult, *JobRecord, error)
}

// InsertClaim is who claims a job InsertClaimed inserts, and for how long.
type InsertClaim struct {
	// Owner identifies the claiming host, as ClaimParams.Owner.
	Owner string
	// LeaseDuration is the lease's length, as ClaimParams.LeaseDuration.
	LeaseDuration time.Duration
	// EarlyStart, when not nil, lets a store that commits the insert
	// before it knows the commit durable (pgstore.WithEarlyDirectStart)
	// hand the claimed job over during that wait (EarlyStarter).
	EarlyStart EarlyStarter
}

// EarlyStarter takes a job that InsertClaimed claimed before the insert
// is known durable. An interface, not a func, so that InsertClaim stays
// comparable.
type EarlyStarter interface {
	// StartEarly is called by a store that commits a direct start's
	// insert first and waits for it to be durable after: at most once,
	// and it has returned before InsertClaimed returns, with the record
	// InsertClaimed returns, once the job is committed and visible. The
	// caller starts the job from StartEarly, not after the return.
	// InsertClaimed still returns only once the job is durable, or with
	// an error when it could not learn that (the job, started, may then
	// be lost with a crash of the database). Stores that do not commit
	// that way never call it, and callers must not rely on it being
	// called.
	StartEarly(rec *JobRecord)
}

// Validate reports, wrapping ErrInvalidParams, what is wrong with c.
func (c *InsertClaim) Validate() error {
	if c == nil {
		return fmt.Errorf("%w: nil insert claim", ErrInvalidParams)
	}
	if c.LeaseDuration <= 0 {
		return fmt.Errorf("%w: lease duration %s <= 0", ErrInvalidParams, c.LeaseDuration)
	}
	if err := CheckText(c.Owner, MaxKindLength); err != nil {
		return fmt.Errorf("%w: owner: %w", ErrInvalidParams, err)
	}
	return nil
}

// Claimable reports whether p is a job InsertClaimed may claim, judged
// from p alone: due at or before now (store clock), with nothing that a
// claim would have to decide (follow-ups, a sequence, a pending bound).
func (p *InsertParams) Claimable(now time.Time) bool {
	return p.Delay <= 0 && !p.RunAt.After(now) && len(p.FollowUps) == 0 && p.SequenceKey == "" && p.PendingLimit == 0
}

// InsertsClaimable reports whether a kind with flow settings c (nil:
// none) may have its jobs claimed as they are inserted: no settings hold
// claims back (HoldsClaims), bound its pending jobs (MaxPending) or
// derive partitions, each of which the store decides at insert or claim.
func (c *FlowConfig) InsertsClaimable() bool {
	return c == nil || (!c.HoldsClaims() && c.MaxPending == 0 && c.Partition.IsZero())
}
