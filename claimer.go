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
// trip after it. The window must cover the slow claims, not the typical
// one: a job that enters it just after a claim began waits for that claim
// and is taken by the next, and both may be slow (under load a claim's
// time varies several-fold, and the tail of the start lag was made of
// jobs claimed after their run_at, not of timers or dispatch). So it is
// claimAheadTimes the slowest claim of the last few seconds (recentMax),
// at least minClaimAhead and at most maxClaimAhead. A job claimed ahead
// holds its worker slot until its start, which bounds the window too.
const (
	claimAheadTimes = 3
	minClaimAhead   = 5 * time.Millisecond
	maxClaimAhead   = 100 * time.Millisecond
)

// A host whose window is narrower than another's never wins a job due
// ahead: the wider one claims it first, every time. And the host with the
// widest window is the busiest one, since its claims wait behind its own
// handlers (for the pool's connections, for the CPU): left alone, the
// windows would pull every job onto the host that already runs the most
// while the others idle (found by the fault scenarios under load, where
// one host of three ran none of 3,000 jobs). So a claim that finds the
// job it was woken for taken by another host (lostRace) counts as a claim
// as slow as the widest window allows: for the next recentSeconds the
// loser claims as far ahead as anyone can, and the race goes to whichever
// host reaches the store first, the least busy one. A host alone never
// loses a race and keeps the window its own claims need.

// claimWindow returns the window of the next claim (ClaimParams.Ahead).
func (r *runtime) claimWindow() time.Duration {
	slowest, _ := r.slowClaims.get(r.s.now())
	return claimAhead(slowest)
}

// claimAhead returns the window of claims for the slowest recent claim.
func claimAhead(slowest time.Duration) time.Duration {
	return min(max(claimAheadTimes*slowest, minClaimAhead), maxClaimAhead)
}

// recentSeconds is how many seconds a recentMax remembers: for the
// slowest claim, long enough to span many claims, so that the window is
// wide before the next slow claim comes, and short enough that one claim
// stuck behind a lock does not widen it for long.
const recentSeconds = 8

// recentMax keeps the largest value of each of the last recentSeconds
// seconds (by the clock the caller passes). Only the claim loop touches
// its instances.
type recentMax struct {
	sec [recentSeconds]int64 // the Unix second of each bucket; 0: empty
	max [recentSeconds]time.Duration
}

// add records v at now.
func (m *recentMax) add(now time.Time, v time.Duration) {
	sec := now.Unix()
	i := int(uint64(sec) % recentSeconds)
	if m.sec[i] != sec {
		m.sec[i], m.max[i] = sec, v
	}
	m.max[i] = max(m.max[i], v)
}

// get returns the largest value recorded in the last recentSeconds
// seconds before now, and false if there is none.
func (m *recentMax) get(now time.Time) (time.Duration, bool) {
	sec := now.Unix()
	var v time.Duration
	found := false
	for i, s := range m.sec {
		if s != 0 && sec-s < recentSeconds && (!found || m.max[i] > v) {
			v, found = m.max[i], true
		}
	}
	return v, found
}

// lostRace reports whether another host took the job a claim was woken
// for: the previous claim named it as the next due (expect, store clock),
// this claim's window covered it, and it neither claimed a job due by
// then nor still sees one. A job cancelled, deleted or paused in between
// counts as a lost race too; the only cost is a wider window for a while.
func lostRace(expect time.Time, res *store.ClaimResult) bool {
	if expect.IsZero() || expect.After(res.Now.Add(res.Ahead)) {
		return false
	}
	if !res.NextRunAt.IsZero() && !res.NextRunAt.After(expect) {
		return false // still there: left for want of slots, or locked by a claim in flight
	}
	for _, rec := range res.Jobs {
		if !rec.RunAt.After(expect) {
			return false
		}
	}
	return true
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

// claimDone ends a claim's hold on the slots it asked for: by then its
// jobs took theirs (launch).
func (r *runtime) claimDone() {
	r.mu.Lock()
	r.claimLimit = 0
	clear(r.claimKinds)
	close(r.claimEnded)
	r.claimEnded = nil
	r.mu.Unlock()
}

// claimLoop runs claim rounds when woken (wheel, notification, freed slot)
// and at least every PollInterval. It only claims and hands off: handlers
// run on their own goroutines, so slow jobs never delay the next wake-up.
func (r *runtime) claimLoop() {
	poll := time.NewTimer(r.cfg.PollInterval)
	defer poll.Stop()
	launched := time.NewTimer(time.Hour)
	launched.Stop()
	failures := 0
	for {
		select {
		case <-r.quit:
			return
		case <-r.wakeCh:
		case <-poll.C:
		}
		next := r.cfg.PollInterval
		r.letLaunchedRun(launched)
		err := r.claimRound()
		// After the claim, so that the jobs it took ahead have their
		// wake-up armed, and it took none ahead while the stale ones
		// still counted as waiting (takeahead.go).
		r.handBackStaleAhead()
		if err != nil {
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
		Ahead: r.claimWindow()}
	r.mu.Lock()
	backlog := r.moreDue
	params.Limit = r.free + aheadRoom(r.cfg.Workers, len(r.waiting), backlog, r.lastClaimTook, r.handlerMean)
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
		limit := k.settings.concurrency - r.busy[k.kind]
		if k.settings.concurrency >= r.cfg.Workers {
			// No cap of its own: the worker slots bound its handlers,
			// and its jobs may be taken ahead of them (takeahead.go).
			limit = params.Limit
		}
		if n := min(limit, params.Limit); n > 0 {
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
	r.claimEnded = make(chan struct{})
	for _, k := range params.Kinds {
		r.claimKinds[k.Kind] = k.Limit
	}
	r.mu.Unlock()
	defer r.claimDone()

	ctx, cancel := context.WithTimeout(r.work, claimTimeout)
	defer cancel()
	before := r.s.now()
	res, err := r.claim(ctx, params, backlog)
	after := r.s.now()
	if err != nil {
		return err
	}
	r.s.measureOffset(before, after, res.Now)
	r.slowClaims.add(after, after.Sub(before))
	r.lastClaimTook = after.Sub(before)
	if lostRace(r.expectNext, res) {
		r.slowClaims.add(after, maxClaimAhead/claimAheadTimes)
	}
	r.expectNext = res.NextRunAt
	hostNow := before.Add(after.Sub(before) / 2)
	// The store's clock had reached clock by the time the claim returned
	// (after): the store's clock is at least clock − after ahead of the
	// host's, so a job claimed ahead that starts RunAt − (clock − after)
	// never starts early by the store's clock. Of the claims of the last
	// few seconds, the one with the largest such bound gives the earliest
	// safe start: a claim whose answer came back late (the client or the
	// server descheduled under load) would otherwise hold its jobs for
	// as long as its answer took.
	clock := res.Clock
	if clock.Before(res.Now) {
		clock = res.Now
	}
	r.storeAhead.add(after, clock.Sub(after))
	ahead, _ := r.storeAhead.get(after)
	// A claim that began before this host paused a kind may return its
	// jobs after the pause: they go back unstarted (kindpause.go).
	jobs := r.withoutPaused(res.Jobs)
	for _, rec := range jobs {
		var startAt time.Time
		if rec.RunAt.After(clock) {
			startAt = rec.RunAt.Add(-ahead)
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
		// More is due and slots remain: claim again now. Not while only
		// jobs taken ahead could be added: they would wait behind those
		// waiting already, and so would the jobs another host hands back
		// (the fault suite's graceful stop on Citus saw re-runs start
		// more than 5 s after the stop when the waiting jobs were topped
		// up so).
		r.wake()
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
