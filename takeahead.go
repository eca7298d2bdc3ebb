package ax

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Taking ahead: a host with few workers and short handlers claims more
// jobs than it has free slots, and the jobs beyond them wait on the host
// for the next slot to free.
//
// A host runs one claim at a time, for the slots free when it begins, and
// every claim and every finish costs the database a statement and a
// commit whatever the jobs it carries. With short handlers, a host's
// slots all free within a claim's time, so it claims as many jobs per
// statement as it has workers: measured with axbench multiprocess on
// PostgreSQL (docs/benchmarks/hosts-2026-12-06.txt), one host of 25
// workers claimed 18 jobs a claim and ran 8,300 no-op jobs/s at 0.119 s
// of server CPU per 1,000 jobs, one host of 100 claimed 99 and ran
// 14,000-24,000 at 0.042-0.050 s; four hosts of 25 ran no more than one.
// So a host with fewer than maxAheadClaim workers takes jobs ahead, up to
// aheadCap in all, but only as many as its workers start within
// one claim's time at the handlers' recent mean duration: a job taken
// ahead then waits on this host about as long as it would have waited for
// the host's next claim, and no longer. Hosts whose handlers take longer
// than a claim take nothing ahead; a host of maxAheadClaim workers or
// more never does. Only a claim that follows one that left due jobs
// behind (a backlog) takes ahead: there is nothing due to take otherwise.
//
// The same holds at the default width, and more so with the database a
// network hop away: a claim's round trip and commit are a fixed cost per
// statement, so a host of 100 that claimed 100 at a time spent most of
// each claim waiting. Holding up to 400, 100 workers ran 1.08 times the
// no-op jobs/s of the code before at 0 and 1.49 times at 1 ms of added
// round trip, at a third of the commits per job (axbench throughput
// -private, docs/benchmarks/ahead-2026-12-06.txt). The claim loop claims
// again at once only while a slot is free, not whenever a job could be
// taken ahead: jobs handed back by a stopped host, and jobs that fall
// due, would wait behind the ones topped up (the fault suite's graceful
// stop on Citus: re-runs 5.3-5.7 s after the stop, against 2.3-2.4 s).

// The handlers' mean is recent (about the last 16), so a host whose
// handlers turn slow at once holds the jobs it took ahead while they were
// short, up to aheadCap − Workers of them, while other hosts may have
// free workers: those that wait too long are handed back
// (handBackStaleAhead, below).

// A job taken ahead is launched as any other, registered (the heartbeat
// extends its lease, Stop hands it back, a cancellation or a lost lease
// ends it) and counted against its kind's Concurrency, but its goroutine
// waits for a slot (waitForSlot) before its handler starts: a freed slot
// goes to the longest waiting one (returnSlot) instead of back to the
// claimer. A kind paused while it waited is handed back unstarted, as a
// job claimed ahead of its run time is.

// A host with short handlers holds at most aheadCap jobs, running and
// taken ahead: maxAheadClaim from minAheadClaim workers up (the default
// width), so a job that waits on the host waits for three batches of its
// workers at most. A host of fewer workers holds minAheadClaim, and up
// to maxAheadClaim only while its workers start the whole hold within
// aheadDrain at the handlers' recent mean (handlers of tens of
// microseconds, say: a host of 25 holds more than 100 only below 500 µs).
// Hosts of 20 and 50 workers allowed four times their workers whatever
// their handlers let jobs wait behind others on one host while other
// hosts' workers freed: the fault suite's graceful stop on Citus (re-runs
// 5.3-5.7 s after the stop, limit 5 s) and flow breaker (held jobs
// started 1.9 s after the breaker closed at p99, limit 1 s) failed. With
// a hold of 100, four hosts of 25 ran 0.75-0.85 times the no-op jobs/s of
// one host of 100, each host claiming 95 jobs a statement against 330;
// with the drained hold they claim about 300 (axbench multiprocess,
// docs/benchmarks/hosts-drain-2026-12-07.txt). aheadDrain bounds the
// handlers' time, not the wait: a hold drains at the rate the host
// starts jobs, which its own CPU per job also bounds. Four hosts of 25
// sharing two cores with the server started about 7,000 jobs a second
// each, so a job waited a median 45 ms between its claim and its start
// (one host of 100: 11 ms; holds of 100: 14 ms), and a High job arriving
// behind the holds 53 ms for the next claim to take it (holds of 100:
// 21 ms), for 1.23–1.24 times the jobs/s (docs/benchmarks/hold-cost-2026-12-07.txt).
const (
	minAheadClaim = 100
	maxAheadClaim = 400
	aheadDrain    = 2 * time.Millisecond
)

// aheadCap returns how many jobs a host of workers holds at most, running
// and taken ahead, with handlers of mean duration (0: not measured yet).
func aheadCap(workers int, mean time.Duration) int {
	if workers >= minAheadClaim {
		return maxAheadClaim
	}
	if mean <= 0 {
		return minAheadClaim
	}
	drained := int64(workers) * int64(aheadDrain) / int64(mean)
	return int(max(minAheadClaim, min(maxAheadClaim, drained)))
}

// handlerMeanWeight is the weight of the newest handler duration in the
// runtime's mean (an exponentially weighted mean over about the last 16
// handlers).
const handlerMeanWeight = 16

// aheadRoom returns how many jobs beyond its free slots a claim may take:
// up to aheadCap(workers, mean) − workers, and as many as workers slots start
// within claimTook at handlers of mean duration, less the jobs that wait
// already (waiting); none without a backlog or a measured mean and claim.
func aheadRoom(workers, waiting int, backlog bool, claimTook, mean time.Duration) int {
	room := aheadCap(workers, mean) - workers
	if !backlog || claimTook <= 0 || mean <= 0 || room <= 0 {
		return 0
	}
	fit := int64(workers) * int64(claimTook) / int64(mean)
	return int(max(0, min(int64(room), fit)-int64(waiting)))
}

// addHandlerTime folds the duration of a handler that ran into the
// runtime's mean. Called with r.mu held.
func (r *runtime) addHandlerTime(took time.Duration) {
	if took <= 0 {
		return
	}
	if r.handlerMean == 0 {
		r.handlerMean = took
		return
	}
	r.handlerMean += (took - r.handlerMean) / handlerMeanWeight
}

// passSlot gives a freed slot to the longest waiting job taken ahead and
// reports whether there was one. Called with r.mu held.
func (r *runtime) passSlot() bool {
	if len(r.waiting) == 0 {
		return false
	}
	a := r.waiting[0]
	r.waiting[0] = nil
	r.waiting = r.waiting[1:]
	a.waitsForSlot = false
	close(a.slot)
	return true
}

// waitForSlot waits until a job taken ahead (a.slot not nil) has a worker
// slot, and reports false if ctx ended first: the attempt then never had
// one (a.noSlot), and its end frees none.
func (r *runtime) waitForSlot(ctx context.Context, a *attempt) bool {
	if a.slot == nil {
		return true
	}
	select {
	case <-a.slot:
		return true
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !a.waitsForSlot {
		// The slot came as ctx ended, and it holds one; or it waited too
		// long and was handed back (handBackStaleAhead), and holds none.
		return !a.noSlot
	}
	a.waitsForSlot = false
	a.noSlot = true
	if i := slices.Index(r.waiting, a); i >= 0 {
		r.waiting = slices.Delete(r.waiting, i, i+1)
	}
	return false
}

// A job taken ahead waits about one claim's time for a slot, since a claim
// takes ahead only as many jobs as the workers start within one at the
// handlers' recent mean. When the handlers turn slow at once, the mean
// learns of it only as they end, and the jobs taken ahead would wait for
// them while other hosts' workers idle: up to aheadCap − Workers jobs, for
// as long as several handlers take. So a job that has waited for a slot
// aheadWaitClaims claims' time, and at least minAheadWait, is handed back
// unstarted, with the others due then, in one store call, its attempt not
// counted: it is due at once again, for any host. The host's handler mean
// is raised to Workers times that wait, so that it takes nothing ahead
// (and not these jobs straight back) until some dozens of handlers have
// ended short again (the mean falls by a sixteenth of the difference per
// handler; it must fall tenfold or more).
const (
	aheadWaitClaims = 10
	minAheadWait    = 250 * time.Millisecond
)

// aheadWaitLimit returns how long a job taken ahead by a claim that took
// claimTook may wait for a slot before it is handed back.
func aheadWaitLimit(claimTook time.Duration) time.Duration {
	return max(minAheadWait, aheadWaitClaims*claimTook)
}

// errWaitedTooLong ends an attempt taken ahead that was handed back
// unstarted because no slot freed for it in time (never written: the
// hand-back discards the result).
var errWaitedTooLong = errors.New("ax: job taken ahead waited too long for a worker slot and was handed back")

// handBackStaleAhead hands back, in one store call, the jobs taken ahead
// whose waitUntil has passed, ends their attempts without their
// handlers, and arms a wake-up of the claim loop for the earliest
// waitUntil of those still waiting. Claim loop only.
func (r *runtime) handBackStaleAhead() {
	now := r.s.now()
	var (
		stale []*attempt
		next  time.Time
	)
	r.mu.Lock()
	r.waiting = slices.DeleteFunc(r.waiting, func(a *attempt) bool {
		if a.waitUntil.After(now) {
			if next.IsZero() || a.waitUntil.Before(next) {
				next = a.waitUntil
			}
			return false
		}
		a.waitsForSlot, a.noSlot = false, true
		if a.extendable() {
			a.released = true
			stale = append(stale, a)
		}
		return true
	})
	limit := aheadWaitLimit(r.lastClaimTook)
	if len(stale) > 0 {
		// Its Workers slots did not start this job within limit. Take
		// nothing ahead until the handlers that end say they are short
		// again: at a mean of Workers × limit, aheadRoom's fit is
		// claimTook / limit, less than one job.
		r.handlerMean = max(r.handlerMean, time.Duration(r.cfg.Workers)*limit)
	}
	arm := !next.IsZero() && (r.staleWake.IsZero() || next.Before(r.staleWake) || !r.staleWake.After(now))
	if arm {
		r.staleWake = next
	}
	r.mu.Unlock()
	if arm {
		r.wakeAt(next)
	}
	if len(stale) == 0 {
		return
	}
	jobs := make([]unstarted, len(stale))
	for i, a := range stale {
		jobs[i] = unstarted{lease: a.lease, kind: a.job.Kind}
	}
	// The limit each job waited out was set at its launch, from the claim
	// time then (at least minAheadWait); limit is the one now.
	r.log.Warn("jobs taken ahead waited too long for a worker slot: handed back for any host",
		zap.Int("jobs", len(stale)), zap.Float64("wait_limit_now_ms", ms(limit)))
	r.handBackUnstarted(jobs, "it waited too long for a worker slot")
	for _, a := range stale {
		a.cancel(errWaitedTooLong)
	}
}
