package ax

import (
	"context"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// lookahead bounds how far ahead wake-ups are kept in the wheel. Later jobs
// stay only in the store; claim rounds and the poll learn of them in time.
const lookahead = time.Minute

// claimTimeout bounds one claim call.
const claimTimeout = 30 * time.Second

// Claims take jobs a little before they fall due (ClaimParams.Ahead), so
// that a handler starts at its job's run_at rather than one claim round
// trip after it: several round trips' worth (the smoothed claim time; a
// claim's time varies several-fold under load), at least minClaimAhead
// and at most maxClaimAhead.
const (
	claimAheadTimes = 8
	minClaimAhead   = 5 * time.Millisecond
	maxClaimAhead   = 50 * time.Millisecond
)

// claimAhead returns the window of claims for a smoothed claim time.
func claimAhead(claimTime time.Duration) time.Duration {
	return min(max(claimAheadTimes*claimTime, minClaimAhead), maxClaimAhead)
}

// nextClaimAt returns when to claim again (host clock) for a job that
// enters the claim window delta after the last claim's now(), which was
// read between before and the claim's end. Without a window (ahead 0) it
// is the midpoint of the call, hostNow: a claim cannot take the job before
// it is due, and waking a little late costs a little lag where waking
// early costs a claim. With one, the next claim reads its now() at or
// after before+delta, so claiming a quarter of the window later still
// finds the job in it, with three quarters left for the round trip to
// its handler's start.
func nextClaimAt(before, hostNow time.Time, delta, ahead time.Duration) time.Time {
	if ahead == 0 {
		return hostNow.Add(delta)
	}
	return before.Add(delta + ahead/4)
}

// smoothClaimTime folds one claim's duration into the smoothed figure
// (weight 1/8, as TCP smooths round trips), capped so that one claim
// stuck behind a lock does not widen the window for long.
func smoothClaimTime(smoothed, took time.Duration) time.Duration {
	took = min(took, maxClaimAhead)
	if smoothed == 0 {
		return took
	}
	return smoothed + (took-smoothed)/8
}

// claimDone ends a claim's hold on the slots it asked for: by then its
// jobs took theirs (launch).
func (r *runtime) claimDone() {
	r.mu.Lock()
	r.claimLimit = 0
	clear(r.claimKinds)
	r.mu.Unlock()
}

// claimLoop runs claim rounds when woken (wheel, notification, freed slot)
// and at least every PollInterval. It only claims and hands off: handlers
// run on their own goroutines, so slow jobs never delay the next wake-up.
func (r *runtime) claimLoop() {
	poll := time.NewTimer(r.cfg.PollInterval)
	defer poll.Stop()
	failures := 0
	for {
		select {
		case <-r.quit:
			return
		case <-r.wakeCh:
		case <-poll.C:
		}
		next := r.cfg.PollInterval
		if err := r.claimRound(); err != nil {
			if r.work.Err() != nil {
				return // Stop's deadline cut the claim short
			}
			failures++
			next = min(time.Duration(1<<min(failures, 10))*10*time.Millisecond, r.cfg.PollInterval)
			r.log.Warn("claim failed", zap.Error(err), zap.Float64(fieldRetryInMS, ms(next)))
		} else {
			failures = 0
		}
		poll.Reset(next)
	}
}

// claimRound claims due jobs for the free worker slots, launches them, and
// arranges the next wake-up from what the store said is due next.
func (r *runtime) claimRound() error {
	kinds := r.s.kinds()
	params := &store.ClaimParams{Owner: r.cfg.Node, LeaseDuration: r.cfg.LeaseDuration, AgeAfter: r.ageAfter,
		Ahead: claimAhead(r.claimTime)}
	r.mu.Lock()
	params.Limit = r.free
	clear(r.capped)
	for _, k := range kinds {
		if r.pauses.paused(k.kind) {
			// Paused cluster-wide: a resume wakes the claimer.
			continue
		}
		if r.breakerHeld[k.kind] > 0 {
			// A failure its breaker counts is not yet written: its
			// write wakes the claimer (breaker.go).
			continue
		}
		if n := min(k.settings.concurrency-r.busy[k.kind], params.Limit); n > 0 {
			params.Kinds = append(params.Kinds, store.KindLimit{Kind: k.kind, Limit: n})
		} else if r.free > 0 {
			// Left out at its cap, so the claim cannot tell whether it
			// has due jobs: a slot of this kind freeing wakes the claimer.
			r.capped[k.kind] = true
		}
	}
	if params.Limit < 1 || len(params.Kinds) == 0 {
		// Every slot is busy: a freed slot wakes the claimer again.
		r.moreDue = len(kinds) > 0
		r.mu.Unlock()
		return nil
	}
	r.claimLimit = params.Limit
	for _, k := range params.Kinds {
		r.claimKinds[k.Kind] = k.Limit
	}
	r.mu.Unlock()
	defer r.claimDone()

	ctx, cancel := context.WithTimeout(r.work, claimTimeout)
	defer cancel()
	before := r.s.now()
	res, err := r.store.Claim(ctx, params)
	after := r.s.now()
	if err != nil {
		return err
	}
	r.s.measureOffset(before, after, res.Now)
	r.claimTime = smoothClaimTime(r.claimTime, after.Sub(before))
	hostNow := before.Add(after.Sub(before) / 2)
	// The store's clock had reached clock by the time the claim returned
	// (after): a job claimed ahead starts RunAt − clock after that, never
	// early by the store's clock.
	clock := res.Clock
	if clock.Before(res.Now) {
		clock = res.Now
	}
	// A claim that began before this host paused a kind may return its
	// jobs after the pause: they go back unstarted (kindpause.go).
	jobs := r.withoutPaused(res.Jobs)
	for _, rec := range jobs {
		var startAt time.Time
		if rec.RunAt.After(clock) {
			startAt = after.Add(rec.RunAt.Sub(clock))
		}
		r.launch(rec, hostNow, startAt)
	}
	for _, t := range res.Breakers {
		r.s.breakerChanged(t)
	}
	if len(jobs) > 0 {
		r.s.capacity.broadcast() // Schedule calls waiting for room may find some
	}

	// A job within the claim's window was claimable by it: it was left
	// for want of slots or locked by another host's claim.
	claimable := res.Now.Add(res.Ahead)
	moreDue := !res.NextRunAt.IsZero() && !res.NextRunAt.After(claimable)
	r.mu.Lock()
	r.moreDue = moreDue
	free := r.free
	r.mu.Unlock()
	switch {
	case moreDue && free > 0 && len(jobs) > 0:
		r.wake() // more is due and slots remain: claim again now
	case moreDue:
		// Slots are full (a freed slot wakes us), or the due rows are
		// locked by another host's claim: look again shortly.
		r.wakeAt(hostNow.Add(10 * time.Millisecond))
	case !res.NextRunAt.IsZero():
		// Measured against the claim's own store reading, so a wrong
		// offset estimate cannot make us wake early or late.
		if delta := res.NextRunAt.Sub(claimable); delta <= lookahead {
			r.wakeAt(nextClaimAt(before, hostNow, delta, res.Ahead))
		}
	}
	return nil
}
