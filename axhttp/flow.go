package axhttp

import (
	"fmt"
	"strings"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// How a kind's flow control reads, in words: the Kinds page and `ax kinds
// list` print these, so an operator reads the same text in both.

// BreakerSummary describes a kind's circuit breakers: "-" without any;
// the kind's, "closed", "half-open", or "open until <RFC 3339 time>";
// then, with a breaker per partition (PartitionBreaker), how many
// partitions are open or half-open: "per tenant: 2 open" (see `ax kinds
// partitions`).
func BreakerSummary(f *ax.FlowState) string {
	if f == nil || (f.Config.Breaker.IsZero() && f.Config.PartitionBreaker.IsZero()) {
		return "-"
	}
	var out []string
	if !f.Config.Breaker.IsZero() {
		switch f.Breaker.State {
		case ax.BreakerOpen:
			out = append(out, "open until "+f.Breaker.ProbeAt.UTC().Format(time.RFC3339))
		case ax.BreakerHalfOpen:
			out = append(out, "half-open")
		default:
			out = append(out, "closed")
		}
	}
	if !f.Config.PartitionBreaker.IsZero() {
		out = append(out, fmt.Sprintf("per %s: %d open", partitionName(f.Config.Partition), f.PartitionBreakersOpen))
	}
	return strings.Join(out, ", ")
}

// partitionName names a partition source as the summaries do: the
// metadata key, or "payload.<field>".
func partitionName(src store.PartitionSource) string {
	if src.Metadata != "" {
		return src.Metadata
	}
	return "payload." + src.PayloadField
}

// PartitionBreakerSummary describes a partition's breaker as `ax kinds
// partitions` prints it: "closed (N failures in a row)", "half-open
// (probe running)" or "open until <RFC 3339 time>".
func PartitionBreakerSummary(p *ax.PartitionBreakerState) string {
	switch p.Breaker.State {
	case ax.BreakerOpen:
		return "open until " + p.Breaker.ProbeAt.UTC().Format(time.RFC3339)
	case ax.BreakerHalfOpen:
		return "half-open (probe running)"
	}
	return fmt.Sprintf("closed (%d failures in a row)", p.Breaker.Failures)
}

// LimitsSummary describes a kind's flow limits, "" without any:
// "5 running, 100/1s, per tenant: 2 running 10/1m0s, 1000 pending".
func LimitsSummary(f *ax.FlowState) string {
	if f == nil {
		return ""
	}
	c := &f.Config
	var out []string
	rate := func(r store.RateLimit) string { return fmt.Sprintf("%d/%s", r.Limit, r.Period) }
	if c.Concurrency > 0 {
		out = append(out, fmt.Sprintf("%d running", c.Concurrency))
	}
	if !c.Rate.IsZero() {
		out = append(out, rate(c.Rate))
	}
	if c.PartitionConcurrency > 0 || !c.PartitionRate.IsZero() {
		key := partitionName(c.Partition)
		var part []string
		if c.PartitionConcurrency > 0 {
			part = append(part, fmt.Sprintf("%d running", c.PartitionConcurrency))
		}
		if !c.PartitionRate.IsZero() {
			part = append(part, rate(c.PartitionRate))
		}
		out = append(out, fmt.Sprintf("per %s: %s", key, strings.Join(part, " ")))
	}
	if c.MaxPending > 0 {
		out = append(out, fmt.Sprintf("%d pending", c.MaxPending))
	}
	return strings.Join(out, ", ")
}

// NowSummary describes where a kind stands against its limits at the
// reading: "3 of 5 running, 40 starts available now" or "0 running, next
// start allowed at <time>"; "" without flow settings.
func NowSummary(f *ax.FlowState) string {
	if f == nil {
		return ""
	}
	c := &f.Config
	out := []string{fmt.Sprintf("%d running", f.Running)}
	if c.Concurrency > 0 {
		out[0] = fmt.Sprintf("%d of %d running", f.Running, c.Concurrency)
	}
	if !c.Rate.IsZero() {
		if f.RateAvailable > 0 || f.RateNextAt.IsZero() {
			out = append(out, fmt.Sprintf("%d starts available now", f.RateAvailable))
		} else {
			out = append(out, "rate limit reached: next start at "+f.RateNextAt.UTC().Format(time.RFC3339))
		}
	}
	return strings.Join(out, ", ")
}
