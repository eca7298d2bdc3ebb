package main

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// startRecord is one handler start seen by a worker with -starts: the
// claim's store time and the job's run_at (Unix µs, store clock), the
// handler's start, and when the Claim call that took the job began and
// returned (Unix ns, host clock; zero when no Claim took it).
type startRecord [5]int64

// claimCall is when one Claim call began and returned (Unix ns).
type claimCall struct{ begin, end int64 }

// claimTimes is a pgstore.Store that remembers, per claimed job, when the
// Claim call that took it began and returned, so the flow scenario can
// split a start's lag into the wait before the claim, its round trip and
// the hand-off to the handler. Embedding keeps every optional interface.
type claimTimes struct {
	*pgstore.Store

	mu    sync.Mutex
	calls map[uuid.UUID]claimCall
}

var _ store.Store = (*claimTimes)(nil)

func (c *claimTimes) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	begin := time.Now().UnixNano()
	res, err := c.Store.Claim(ctx, p)
	if err != nil || len(res.Jobs) == 0 {
		return res, err
	}
	call := claimCall{begin: begin, end: time.Now().UnixNano()}
	c.mu.Lock()
	if c.calls == nil {
		c.calls = make(map[uuid.UUID]claimCall)
	}
	for _, j := range res.Jobs {
		c.calls[j.ID] = call
	}
	c.mu.Unlock()
	return res, nil
}

// of returns the Claim call that took job id (zero if none did).
func (c *claimTimes) of(id uuid.UUID) claimCall {
	if c == nil {
		return claimCall{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}
