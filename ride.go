package ax

import (
	"context"
	"slices"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Outcomes ride with claims (Config.OutcomesWithClaims, off by default).
// While due jobs wait for worker slots (a backlog: the last claim left
// some behind), each worker that frees up queues its job's outcome and
// wakes the claimer; the claim and the outcome's write go to the store as
// two round trips and two commits, side by side. With the option and a
// store.FinishClaimer, the claim of such a round takes the queued outcomes
// with it: one round trip, one commit (pgstore). Claims of jobs falling
// due (wheel, notifications, polls) go alone, so that the write never
// delays a start the claim window was sized for. Off by default because
// the claim then waits for the writes that ran beside it: fewer jobs/s
// for fewer commits (docs/performance.md).
//
// Only plain outcomes ride: not one written in a handler's transaction
// (CompleteTx), nor one with a result or Then jobs, nor a batch child's,
// since their writes may wait for a lock another transaction holds and
// the claim would wait with them. The completer writes those, and every
// outcome a ride could not write, as before.

// claim makes a claim round's claim, with the queued outcomes riding when
// the round serves a backlog.
func (r *runtime) claim(ctx context.Context, params *store.ClaimParams, backlog bool) (*store.ClaimResult, error) {
	if r.riders == nil || !backlog {
		return r.store.Claim(ctx, params)
	}
	batch := r.completer.takeRiders()
	if len(batch) == 0 {
		return r.store.Claim(ctx, params)
	}
	finish := make([]store.FinishParams, len(batch))
	for i := range batch {
		finish[i] = batch[i].params
	}
	fr, res, err := r.riders.FinishClaim(ctx, finish, params)
	r.completer.settleRiders(batch, fr, err != nil && res != nil)
	if err == nil {
		return res, nil
	}
	if res != nil {
		// The claim stands; only some outcomes went unwritten, and the
		// completer writes them again.
		r.log.Warn("outcomes riding with a claim not all written; writing them again", zap.Error(err))
		return res, nil
	}
	if fr == nil && ctx.Err() == nil {
		// Nothing was written: the completer writes the outcomes, and
		// the claim goes alone, so that a bad outcome cannot hold claims
		// back.
		return r.store.Claim(ctx, params)
	}
	return nil, err
}

// takeRiders removes and returns up to maxFlushBatch queued outcomes
// that may ride with a claim (see above), leaving the others queued in
// their order.
func (c *completer) takeRiders() []completion {
	c.mu.Lock()
	defer c.mu.Unlock()
	var riders []completion
	kept := c.queue[:0]
	urgent := false
	for _, cp := range c.queue {
		if len(riders) < maxFlushBatch && rides(&cp) {
			riders = append(riders, cp)
			continue
		}
		kept = append(kept, cp)
		urgent = urgent || cp.breakerHeld
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	c.urgent = urgent
	if len(riders) > 0 {
		c.hasRoom.Broadcast()
	}
	return riders
}

// rides reports whether an outcome may ride with a claim: its write never
// waits for another transaction's lock.
func rides(cp *completion) bool {
	p := &cp.params
	return !cp.inTx && p.Result == nil && len(p.Then) == 0 && cp.attempt.job.Batch == uuid.Nil
}

// settleRiders ends the outcomes a FinishClaim call took, as its results
// say (store.FinishClaimer): written ones are reported, the others go
// back to the queue, for the completer to write with its retries. partial
// tells that the call failed after its claim was made: only the outcomes
// reported applied are known written, and Finish tells a lost lease from
// an unwritten outcome among the others.
func (c *completer) settleRiders(batch []completion, fr *store.FinishResult, partial bool) {
	if fr == nil {
		c.requeue(batch)
		return
	}
	if partial {
		var applied, again []completion
		for i, cp := range batch {
			if fr.OK[i] {
				applied = append(applied, cp)
			} else {
				again = append(again, cp)
			}
		}
		c.requeue(again)
		c.written(applied, slices.Repeat([]bool{true}, len(applied)))
	} else {
		c.written(batch, fr.OK)
	}
	for _, t := range fr.Breakers {
		c.r.s.breakerChanged(t)
	}
}

// requeue puts outcomes a ride did not write back at the head of the
// queue, for the completer's next flush. The claim loop rides, and Stop
// ends it before it closes the queue, so they are always written or
// counted.
func (c *completer) requeue(batch []completion) {
	if len(batch) == 0 {
		return
	}
	c.mu.Lock()
	c.queue = append(batch, c.queue...)
	for _, cp := range batch {
		c.urgent = c.urgent || cp.breakerHeld
	}
	c.mu.Unlock()
	c.signal()
}
