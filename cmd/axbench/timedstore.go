package main

import (
	"context"
	"sync"
	"time"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// timedStore is a pgstore.Store whose Claim, Finish (FinishFlow) and ExtendLeases are
// timed from the client, so a scenario can show how long the scheduler's
// store calls take while the server is under stress (a held snapshot).
// Embedding keeps every other method, and so every optional interface the
// Scheduler looks for by type assertion (Notifier, Leaser, ...).
type timedStore struct {
	*pgstore.Store
	begin time.Time

	mu    sync.Mutex
	calls []storeCall
}

var (
	_ store.Store    = (*timedStore)(nil)
	_ store.Notifier = (*timedStore)(nil)
)

// storeOp names a timed call.
type storeOp uint8

const (
	opClaim storeOp = iota
	opFinish
	opExtend
	opDirect // InsertClaimed: jobs is 1 when it claimed
)

// storeCall is one timed call: when it started (since begin), how long it
// took and how many jobs it carried.
type storeCall struct {
	op   storeOp
	at   time.Duration
	took time.Duration
	jobs int32
	// parts: with a traced pool (callTracer), the time took spent waiting
	// for a connection and in statements.
	parts callTimes
}

func newTimedStore(st *pgstore.Store) *timedStore {
	return &timedStore{Store: st, begin: time.Now(), calls: make([]storeCall, 0, 1<<16)}
}

func (s *timedStore) record(op storeOp, t0 time.Time, jobs int) {
	s.recordParts(op, t0, jobs, callTimes{})
}

func (s *timedStore) recordParts(op storeOp, t0 time.Time, jobs int, parts callTimes) {
	c := storeCall{op: op, at: t0.Sub(s.begin), took: time.Since(t0), jobs: int32(jobs), parts: parts}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// Claim is timed, and on a traced pool (callTracer) split into pool
// acquire and statement time.
func (s *timedStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	var parts callTimes
	t0 := time.Now()
	res, err := s.Store.Claim(withCallTimes(ctx, &parts), p)
	if err == nil {
		s.recordParts(opClaim, t0, len(res.Jobs), parts)
	}
	return res, err
}

// InsertClaimed is Schedule's direct start (ax's direct.go): timed, with
// whether it claimed the job, and on a traced pool (callTracer) split
// into pool acquire and statement time.
func (s *timedStore) InsertClaimed(ctx context.Context, p *store.InsertParams, c *store.InsertClaim) (store.InsertResult, *store.JobRecord, error) {
	var parts callTimes
	t0 := time.Now()
	res, rec, err := s.Store.InsertClaimed(withCallTimes(ctx, &parts), p, c)
	if err == nil {
		n := 0
		if rec != nil {
			n = 1
		}
		s.recordParts(opDirect, t0, n, parts)
	}
	return res, rec, err
}

func (s *timedStore) Finish(ctx context.Context, p []store.FinishParams) ([]bool, error) {
	var parts callTimes
	t0 := time.Now()
	ok, err := s.Store.Finish(withCallTimes(ctx, &parts), p)
	if err == nil {
		s.recordParts(opFinish, t0, len(p), parts)
	}
	return ok, err
}

// FinishFlow is what the scheduler calls on a store with flow control
// (pgstore), so it is timed as Finish.
func (s *timedStore) FinishFlow(ctx context.Context, p []store.FinishParams) (*store.FinishResult, error) {
	var parts callTimes
	t0 := time.Now()
	res, err := s.Store.FinishFlow(withCallTimes(ctx, &parts), p)
	if err == nil {
		s.recordParts(opFinish, t0, len(p), parts)
	}
	return res, err
}

func (s *timedStore) ExtendLeases(ctx context.Context, p *store.ExtendParams) (*store.ExtendResult, error) {
	t0 := time.Now()
	res, err := s.Store.ExtendLeases(ctx, p)
	if err == nil {
		s.record(opExtend, t0, 0)
	}
	return res, err
}

// snapshot returns a copy of the calls recorded so far.
func (s *timedStore) snapshot() []storeCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storeCall(nil), s.calls...)
}

// callStats summarises the calls of op that started in [from, to).
type callStats struct {
	n, jobs int64
	took    durations
}

func summarize(calls []storeCall, op storeOp, from, to time.Duration) callStats {
	var cs callStats
	for _, c := range calls {
		if c.op == op && c.at >= from && c.at < to {
			cs.n++
			cs.jobs += int64(c.jobs)
			cs.took = append(cs.took, c.took)
		}
	}
	return cs
}

// claimFigures adds what the scheduler's claims cost to r: how many there
// were per job they took, and how long each took from the client.
func claimFigures(r *result, ts *timedStore) {
	cs := summarize(ts.snapshot(), opClaim, 0, 1<<62)
	if cs.jobs > 0 {
		r.add("claims per job claimed", float64(cs.n)/float64(cs.jobs), "")
	}
	r.add("claim p50", ms(cs.took.pct(50)), "ms")
	r.add("claim p99", ms(cs.took.pct(99)), "ms")
	if ds := summarize(ts.snapshot(), opDirect, 0, 1<<62); ds.n > 0 {
		r.add("Schedule calls that started their job directly", 100*float64(ds.jobs)/float64(ds.n), "%")
		r.add("direct start (InsertClaimed) p50", ms(ds.took.pct(50)), "ms")
		r.add("direct start (InsertClaimed) p99", ms(ds.took.pct(99)), "ms")
	}
}
