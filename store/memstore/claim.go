package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Claim moves up to params.Limit due jobs of the requested kinds to running,
// as store.Store.Claim and store.FlowStore document: first the jobs due
// for at least params.AgeAfter (when > 0), oldest first whatever their
// priority, then strictly by priority, then run_at, then ID, taking at
// most each kind's limit and only what the kinds' flow settings allow
// (concurrency cluster-wide and per partition, rate buckets, breakers)
// and, of a sequence, only its first job while none of it runs. A kind
// listed twice keeps its first limit. Each claimed job gets Owner, a fresh
// random LeaseToken, LeaseExpiresAt = now + LeaseDuration, AttemptedAt =
// now, Attempt + 1, Fence + 1 and CancelRequested and PauseRequested
// false. A claim that starts a breaker's probe reports the transition in
// ClaimResult.Breakers.
//
// Jobs due within params.Ahead are claimed too, with AttemptedAt = RunAt,
// unless a requested kind has flow settings that hold claims back or
// sequences; ClaimResult.Ahead is the window applied and ClaimResult.Clock
// is Now.
//
// ClaimResult.NextRunAt is the earliest time a claimable job of the
// requested kinds left behind may be claimed: its run_at, or later when a
// rate bucket or a breaker's cool-down holds it; jobs held until a running
// job ends are left out (their end notifies subscribers). It is zero when
// there are none. Invalid params (ClaimParams.Validate, or a kind that is
// not a storable text) fail with an error wrapping store.ErrInvalidParams.
//
// The cost is O(claimed · (partitions · 3 + log n)): only the heads of the
// per-partition, per-priority heaps are read (kinds without partitions
// have one).
func (s *Store) Claim(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if params == nil {
		return nil, fmt.Errorf("claim jobs: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	for _, k := range params.Kinds {
		if err := checkTexts(k.Kind); err != nil {
			return nil, fmt.Errorf("claim jobs: kind: %w", err)
		}
	}
	var buf [8]want
	wants := buf[:0]

	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	now := s.clock()
	res := &store.ClaimResult{Now: now}

next:
	for _, kl := range params.Kinds {
		k := s.kinds[kl.Kind]
		if k == nil {
			continue
		}
		for _, w := range wants {
			if w.k == k {
				continue next
			}
		}
		wants = append(wants, s.newWant(k, kl.Limit, now))
	}

	c := claiming{s: s, params: params, res: res, now: now, left: params.Limit,
		expires: stamp(now.Add(params.LeaseDuration))}
	if params.AgeAfter > 0 {
		cutoff := now.Add(-params.AgeAfter)
		for c.left > 0 && c.takeBest(wants, allPriorities[:], cutoff) {
		}
	}
	// Jobs due within params.Ahead are claimed too, after the aged ones,
	// unless flow control or a sequence decides what may start (as
	// pgstore's flow claim, which takes due jobs only).
	if aheadApplies(wants) {
		res.Ahead = params.Ahead
	}
	res.Clock = now
	by := now.Add(res.Ahead)
	for pr := range priorityLevels {
		for c.left > 0 && c.takeBest(wants, allPriorities[pr:pr+1], by) {
		}
	}
	for i := range wants {
		wants[i].settle(now)
	}
	res.NextRunAt = s.nextRunAt(wants, now)

	var ns notes
	s.takeWakes(&ns)
	s.mu.Unlock()
	s.subs.deliver(ns.list)
	return res, nil
}

// aheadApplies reports whether a claim of wants may take jobs ahead of
// their run_at: none of the kinds has flow settings that hold claims back
// or sequences.
func aheadApplies(wants []want) bool {
	for i := range wants {
		w := &wants[i]
		if (w.f != nil && w.f.cfg.HoldsClaims()) || len(w.k.seqs) > 0 {
			return false
		}
	}
	return true
}

// allPriorities lists the indexes of the due heaps, in claim order.
var allPriorities = [...]int{0, 1, 2}

// want is a kind a claim asks for and what it may still take of it.
type want struct {
	k    *kindIndex
	f    *flowState // nil: the kind has no flow settings
	left int        // the caller's limit for the kind, less what was taken

	rateLeft  int            // starts the kind's rate bucket allows (unused without a rate)
	taken     int            // jobs taken of the kind
	partTaken map[string]int // jobs taken per partition (with a partition rate)
}

func (s *Store) newWant(k *kindIndex, limit int, now time.Time) want {
	w := want{k: k, f: s.flows[k.name], left: limit}
	if w.f != nil && !w.f.cfg.Rate.IsZero() {
		w.rateLeft = w.f.cfg.Rate.Available(w.f.tat, now)
	}
	return w
}

// running returns how many jobs of the kind run.
func (w *want) running() int64 { return w.k.counts[stateIndex(store.StateRunning)] }

// kindAllows reports whether the kind may start a job now, as far as the
// caller's limit and the kind-wide flow settings go.
func (w *want) kindAllows(now time.Time) bool {
	if w.left == 0 {
		return false
	}
	f := w.f
	if f == nil {
		return true
	}
	if hold, at := w.breakerHold(now); hold || !at.IsZero() {
		return false
	}
	if f.cfg.Concurrency > 0 && w.running() >= int64(f.cfg.Concurrency) {
		return false
	}
	return f.cfg.Rate.IsZero() || w.rateLeft > 0
}

// breakerHold reports whether the kind's breaker holds its jobs until a
// running job ends (hold), or until a time (at, not zero).
func (w *want) breakerHold(now time.Time) (hold bool, at time.Time) {
	b := &w.f.breaker
	switch {
	case w.f.cfg.Breaker.IsZero() || b.Closed():
		return false, time.Time{}
	case b.State == store.BreakerOpen && now.Before(b.ProbeAt):
		return false, b.ProbeAt
	}
	// Open past its cool-down, or half-open: one probe at a time.
	return w.running() > 0, time.Time{}
}

// partAllows reports whether partition p may start a job now.
func (w *want) partAllows(p *partIndex, now time.Time) bool {
	f := w.f
	if f == nil {
		return true
	}
	if f.cfg.PartitionConcurrency > 0 && p.running >= f.cfg.PartitionConcurrency {
		return false
	}
	if ok, _ := w.partBreakerHold(p, now); !ok {
		return false
	}
	return f.cfg.PartitionRate.IsZero() || f.cfg.PartitionRate.Available(f.partTAT[p.key], now) > w.partTaken[p.key]
}

// settle writes the rate buckets the claim drew on.
func (w *want) settle(now time.Time) {
	f := w.f
	if f == nil || w.taken == 0 {
		return
	}
	if !f.cfg.Rate.IsZero() {
		f.tat = f.cfg.Rate.Take(f.tat, now, w.taken)
	}
	for key, n := range w.partTaken {
		if f.partTAT == nil {
			f.partTAT = make(map[string]time.Time)
		}
		f.partTAT[key] = f.cfg.PartitionRate.Take(f.partTAT[key], now, n)
	}
	w.partTaken = nil
}

// claiming is one claim in progress.
type claiming struct {
	s       *Store
	params  *store.ClaimParams
	res     *store.ClaimResult
	now     time.Time
	expires time.Time
	left    int
}

// takeBest claims the job that comes first among the heads of the
// priorities prs (indexes of the due heaps) due at or before by, in the
// partitions and kinds that may start one, and reports whether there was
// one.
func (c *claiming) takeBest(wants []want, prs []int, by time.Time) bool {
	var (
		best *job
		bw   *want
	)
	for i := range wants {
		w := &wants[i]
		if !w.kindAllows(c.now) {
			continue
		}
		for _, p := range w.k.partList {
			if !w.partAllows(p, c.now) {
				continue
			}
			for _, pr := range prs {
				j := p.due[pr].top()
				if j == nil || j.rec.RunAt.After(by) {
					continue
				}
				if best == nil || claimsBefore(j, best) {
					best, bw = j, w
				}
			}
		}
	}
	if best == nil {
		return false
	}
	c.take(bw, best)
	return true
}

// take claims j, of the kind w.
func (c *claiming) take(w *want, j *job) {
	w.left--
	c.left--
	w.taken++
	if f := w.f; f != nil {
		if !f.cfg.Rate.IsZero() {
			w.rateLeft--
		}
		if !f.cfg.PartitionRate.IsZero() {
			if w.partTaken == nil {
				w.partTaken = make(map[string]int)
			}
			w.partTaken[j.rec.PartitionKey]++
		}
		if !f.cfg.Breaker.IsZero() {
			if t := f.breaker.Probe(w.k.name, c.now); t != nil {
				c.res.Breakers = append(c.res.Breakers, *t)
			}
		}
		if t := w.probePartBreaker(j, c.now); t != nil {
			c.res.Breakers = append(c.res.Breakers, *t)
		}
	}
	c.s.start(j, c.params.Owner, c.now, c.expires)
	c.res.Jobs = append(c.res.Jobs, copyRecord(&j.rec))
}

// start makes claimable j running for owner, as a claim at now with a
// lease until expires: a fresh random LeaseToken, AttemptedAt = now (or
// its run_at, when claimed ahead), Attempt + 1, Fence + 1 and the cancel
// and pause requests cleared. Called with s.mu held.
func (s *Store) start(j *job, owner string, now, expires time.Time) {
	s.unindex(j)
	r := &j.rec
	r.State = store.StateRunning
	r.Owner = owner
	r.LeaseToken = uuid.New()
	j.ended = uuid.Nil // one token per job, as a database row keeps it
	r.LeaseExpiresAt = expires
	r.AttemptedAt = latest(now, r.RunAt) // claimed ahead: the attempt starts at its run_at
	r.Attempt++
	r.Fence++
	r.CancelRequested = false
	r.PauseRequested = false
	s.index(j)
}

// nextRunAt returns the earliest time a claimable job of wants may be
// claimed (zero: none), leaving out the jobs held until a running job ends.
func (s *Store) nextRunAt(wants []want, now time.Time) time.Time {
	var next time.Time
	for i := range wants {
		w := &wants[i]
		hold, at := w.heldUntil(now)
		if hold {
			continue
		}
		for _, p := range w.k.partList {
			phold, pat := w.partHeldUntil(p, now)
			if phold {
				continue
			}
			for pr := range p.due {
				j := p.due[pr].top()
				if j == nil {
					continue
				}
				t := latest(j.rec.RunAt, at, pat)
				if next.IsZero() || t.Before(next) {
					next = t
				}
			}
		}
	}
	return next
}

// heldUntil reports, after the claim, whether the kind's flow settings
// hold its jobs until a running job ends (hold), or until a time (at).
func (w *want) heldUntil(now time.Time) (hold bool, at time.Time) {
	f := w.f
	if f == nil {
		return false, time.Time{}
	}
	if hold, at = w.breakerHold(now); hold {
		return true, at
	}
	if f.cfg.Concurrency > 0 && w.running() >= int64(f.cfg.Concurrency) {
		return true, at
	}
	if r := f.cfg.Rate; !r.IsZero() && r.Available(f.tat, now) == 0 {
		at = latest(at, r.NextAt(f.tat))
	}
	return false, at
}

// partHeldUntil is heldUntil for partition p.
func (w *want) partHeldUntil(p *partIndex, now time.Time) (hold bool, at time.Time) {
	f := w.f
	if f == nil {
		return false, time.Time{}
	}
	if f.cfg.PartitionConcurrency > 0 && p.running >= f.cfg.PartitionConcurrency {
		return true, at
	}
	ok, bat := w.partBreakerHold(p, now)
	if !ok && bat.IsZero() {
		return true, at // a probe runs: its end notifies
	}
	at = bat
	if r := f.cfg.PartitionRate; !r.IsZero() {
		if tat := f.partTAT[p.key]; r.Available(tat, now) == 0 {
			at = latest(at, r.NextAt(tat))
		}
	}
	return false, at
}

// latest returns the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// claimsBefore reports whether a is claimed before b at the same priority.
func claimsBefore(a, b *job) bool {
	if !a.rec.RunAt.Equal(b.rec.RunAt) {
		return a.rec.RunAt.Before(b.rec.RunAt)
	}
	return idLess(a.rec.ID, b.rec.ID)
}
