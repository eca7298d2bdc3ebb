package main

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
)

// waitHist counts durations in microseconds, in buckets of one eighth of a
// power of two (each within 12.5 % of its values), with an atomic add per
// value: handlers on every worker record into it without a lock, so the
// measurement does not slow the jobs it measures. It answers what a
// per-job slice would, for runs of millions of jobs, in a fixed 2.5 KiB.
type waitHist struct {
	counts [waitBuckets]atomic.Int64
	max    atomic.Int64 // µs
}

// waitBuckets covers 0 to 2^41 µs (25 days): 8 exact buckets below 8 µs,
// then 8 per power of two.
const waitBuckets = 8 * 39

// waitBucket returns the bucket of us (negative counts as 0).
func waitBucket(us int64) int {
	if us < 8 {
		return int(max(us, 0))
	}
	l := bits.Len64(uint64(us)) // ≥ 4
	mant := us >> (l - 4)       // 8..15
	return min(8*(l-3)+int(mant-8), waitBuckets-1)
}

// waitBucketLow returns the smallest value in bucket i.
func waitBucketLow(i int) int64 {
	if i < 8 {
		return int64(i)
	}
	l := i/8 + 3
	return int64(i%8+8) << (l - 4)
}

// record counts d.
func (h *waitHist) record(d time.Duration) {
	us := d.Microseconds()
	h.counts[waitBucket(us)].Add(1)
	for {
		m := h.max.Load()
		if us <= m || h.max.CompareAndSwap(m, us) {
			return
		}
	}
}

// waitCounts are a waitHist's counts as a worker reports them: Counts[i]
// is bucket i's (trailing empty buckets left off), MaxUS the largest.
type waitCounts struct {
	Counts []int64 `json:"counts,omitempty"`
	MaxUS  int64   `json:"max_us"`
}

// snapshot returns h's counts.
func (h *waitHist) snapshot() waitCounts {
	var c waitCounts
	last := -1
	all := make([]int64, waitBuckets)
	for i := range h.counts {
		all[i] = h.counts[i].Load()
		if all[i] != 0 {
			last = i
		}
	}
	c.Counts = all[:last+1]
	c.MaxUS = h.max.Load()
	return c
}

// add adds o's counts to c.
func (c *waitCounts) add(o waitCounts) {
	if len(o.Counts) > len(c.Counts) {
		c.Counts = append(c.Counts, make([]int64, len(o.Counts)-len(c.Counts))...)
	}
	for i, n := range o.Counts {
		c.Counts[i] += n
	}
	c.MaxUS = max(c.MaxUS, o.MaxUS)
}

// total returns how many durations c counts.
func (c waitCounts) total() int64 {
	var n int64
	for _, v := range c.Counts {
		n += v
	}
	return n
}

// quantile returns an upper bound of the q-quantile (0 < q ≤ 1): the top
// of the bucket that holds it, no more than the largest value seen.
func (c waitCounts) quantile(q float64) time.Duration {
	n := c.total()
	if n == 0 {
		return 0
	}
	rank := max(int64(q*float64(n)+0.5), 1) // the rank-th smallest value
	var seen int64
	for i, v := range c.Counts {
		seen += v
		if seen >= rank {
			top := waitBucketLow(i+1) - 1
			return time.Duration(min(top, c.MaxUS)) * time.Microsecond
		}
	}
	return time.Duration(c.MaxUS) * time.Microsecond
}

// claimToStartNote says what addClaimToStart's figures measure.
const claimToStartNote = "claim → handler start: a job's claim time (store clock, the claim transaction's start) to its handler's start (host clock; server and hosts on one machine, so one clock): the claim statement, its return, and the wait of a job taken ahead for a free slot"

// addClaimToStart adds to r the percentiles of a run's claim → handler
// start durations, each name prefixed with what.
func addClaimToStart(r *result, c waitCounts, what string) {
	addQuantiles(r, c, what+"claim → handler start")
}

// addQuantiles adds to r c's p50, p99, p99.9 and max in milliseconds,
// each named what and the quantile; nothing when c counts nothing.
func addQuantiles(r *result, c waitCounts, what string) {
	if c.total() == 0 {
		return
	}
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}, {"p99.9", 0.999}, {"max", 1}} {
		r.add(fmt.Sprintf("%s %s", what, q.name), float64(c.quantile(q.q))/float64(time.Millisecond), "ms")
	}
}
