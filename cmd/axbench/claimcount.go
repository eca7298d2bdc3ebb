package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// claimCounts are a worker's Claim calls, split by what they returned.
type claimCounts struct {
	Calls int64 `json:"calls"` // Claim calls that succeeded
	Asked int64 `json:"asked"` // their Limits, summed
	Jobs  int64 `json:"jobs"`  // jobs they returned
	// Empty are the calls that returned no job while the store still saw
	// one due within the call's window (locked by another host's claim,
	// or left for want of slots: the runtime then waits 10 ms or for a
	// slot); Short the calls that returned fewer jobs than asked for, but
	// some, while more was due.
	Empty int64 `json:"empty"`
	Short int64 `json:"short"`
	NS    int64 `json:"ns"` // time in Claim calls, summed
}

// claimCounter is a pgstore.Store that counts Claim calls (claimCounts).
// Embedding keeps every optional interface; claim is the Claim it counts
// (the Store's own, or claimTimes').
type claimCounter struct {
	*pgstore.Store
	claim                                func(context.Context, *store.ClaimParams) (*store.ClaimResult, error)
	calls, asked, jobs, empty, short, ns atomic.Int64
}

var _ store.Store = (*claimCounter)(nil)

func (c *claimCounter) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	begin := time.Now()
	res, err := c.claim(ctx, p)
	c.ns.Add(int64(time.Since(begin)))
	if err != nil {
		return res, err
	}
	c.calls.Add(1)
	c.asked.Add(int64(p.Limit))
	c.jobs.Add(int64(len(res.Jobs)))
	more := !res.NextRunAt.IsZero() && !res.NextRunAt.After(res.Now.Add(res.Ahead))
	switch {
	case more && len(res.Jobs) == 0:
		c.empty.Add(1)
	case more && len(res.Jobs) < p.Limit:
		c.short.Add(1)
	}
	return res, nil
}

func (c *claimCounter) counts() claimCounts {
	return claimCounts{Calls: c.calls.Load(), Asked: c.asked.Load(), Jobs: c.jobs.Load(),
		Empty: c.empty.Load(), Short: c.short.Load(), NS: c.ns.Load()}
}
