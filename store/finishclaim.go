package store

import "context"

// FinishClaimer is implemented by stores that can write a host's attempt
// outcomes and make its next claim in one round trip: the Scheduler's
// claims ride with its outcome writes when a worker frees up while due
// jobs wait (a backlog), so that a host spends one round trip, and one
// commit, where it spent two.
type FinishClaimer interface {
	// FinishClaim is FinishFlow(finish) (Finish for a store that is not a
	// FlowStore: FinishResult.Breakers then stays empty) followed by
	// Claim(claim), each by its own rules; a store may make both in one
	// transaction, the claim seeing what the outcomes did. The claim's
	// ClaimResult.Now is not earlier than the outcomes' writes.
	//
	// Invalid finish rows or claim params fail with an error wrapping
	// ErrInvalidParams before anything is written or claimed. On another
	// error, the results say what stands:
	//
	//   - no *FinishResult: no outcome was written and no job claimed;
	//   - a *FinishResult and no *ClaimResult: the outcomes were written as
	//     it reports, and the claim failed;
	//   - both: the claim was made (its jobs are the caller's), and of the
	//     outcomes only those reported applied are known written; the
	//     caller writes the others again with Finish, which tells a lost
	//     lease from an outcome that was not written.
	FinishClaim(ctx context.Context, finish []FinishParams, claim *ClaimParams) (*FinishResult, *ClaimResult, error)
}
