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
	params := &store.ClaimParams{Owner: r.cfg.Node, LeaseDuration: r.cfg.LeaseDuration, AgeAfter: r.ageAfter}
	r.mu.Lock()
	params.Limit = r.free
	clear(r.capped)
	for _, k := range kinds {
		if r.pauses.paused(k.kind) {
			// Paused cluster-wide: a resume wakes the claimer.
			continue
		}
		if n := min(k.settings.concurrency-r.busy[k.kind], r.free); n > 0 {
			params.Kinds = append(params.Kinds, store.KindLimit{Kind: k.kind, Limit: n})
		} else if r.free > 0 {
			// Left out at its cap, so the claim cannot tell whether it
			// has due jobs: a slot of this kind freeing wakes the claimer.
			r.capped[k.kind] = true
		}
	}
	if params.Limit == 0 || len(params.Kinds) == 0 {
		// Every slot is busy: a freed slot wakes the claimer again.
		r.moreDue = len(kinds) > 0
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(r.work, claimTimeout)
	defer cancel()
	before := r.s.now()
	res, err := r.store.Claim(ctx, params)
	after := r.s.now()
	if err != nil {
		return err
	}
	r.s.measureOffset(before, after, res.Now)
	hostNow := before.Add(after.Sub(before) / 2)
	for _, rec := range res.Jobs {
		r.launch(rec, hostNow)
	}
	for _, t := range res.Breakers {
		r.s.breakerChanged(t)
	}
	if len(res.Jobs) > 0 {
		r.s.capacity.broadcast() // Schedule calls waiting for room may find some
	}

	moreDue := !res.NextRunAt.IsZero() && !res.NextRunAt.After(res.Now)
	r.mu.Lock()
	r.moreDue = moreDue
	free := r.free
	r.mu.Unlock()
	switch {
	case moreDue && free > 0 && len(res.Jobs) > 0:
		r.wake() // more is due and slots remain: claim again now
	case moreDue:
		// Slots are full (a freed slot wakes us), or the due rows are
		// locked by another host's claim: look again shortly.
		r.wakeAt(hostNow.Add(10 * time.Millisecond))
	case !res.NextRunAt.IsZero():
		// Measured against the claim's own store reading, so a wrong
		// offset estimate cannot make us wake early or late.
		if delta := res.NextRunAt.Sub(res.Now); delta <= lookahead {
			r.wakeAt(hostNow.Add(delta))
		}
	}
	return nil
}
