package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Flow control across the cluster: limits that hold for every host
// because the store applies them where jobs start (Claim), end (Finish)
// and arrive (Insert). It is an optional ability (FlowStore, found by type
// assertion); a store without it must not be handed the fields below (the
// scheduler refuses the options that need them).
//
// A kind's flow settings (FlowConfig) are declared by the hosts that
// handle it, at their start, and stored: the last writer wins. The store
// applies them for every caller, hosts that only schedule jobs included:
//
//   - Concurrency: at most n jobs of the kind run at once, cluster-wide.
//     A claim takes a job only while fewer run; a job stops counting when
//     it leaves running by whatever path (Finish, RescueExpired), so a
//     slot held by a dead host frees when its lease is rescued.
//   - Partitions: each job gets a partition key when it is inserted,
//     derived from its metadata or its payload (PartitionSource); at most
//     PartitionConcurrency jobs of one partition run at once, and
//     PartitionRate limits each partition's starts.
//   - Rate: at most Limit starts in any window of Period (RateLimit),
//     kept as a token bucket in the store.
//   - Breaker: a circuit breaker per kind (BreakerConfig, BreakerStatus)
//     fed by Finish, read by Claim.
//   - PartitionBreaker: a circuit breaker per partition key, with a
//     state kept only for failing partitions (PartitionBreakerStore, an
//     optional ability of a FlowStore).
//   - MaxPending: Insert refuses rows of the kind while that many of its
//     jobs are pending (PendingLimitError). Jobs the store inserts itself
//     (a periodic tick, follow-ups, a batch's completion) are never
//     refused.
//
// Jobs held back by flow control stay as they are (scheduled or retrying,
// attempts untouched) and wait. A FlowStore also honours, for every job
// whatever its kind's settings, ClaimParams.AgeAfter (priority aging),
// InsertParams.SequenceKey (jobs that run one at a time in scheduled
// order) and InsertParams.PendingLimit (a producer's bound on all pending
// jobs).
//
// Wake-ups: ClaimResult.NextRunAt counts a job held back until a given
// time (the next rate token, the end of a breaker's cool-down) at that
// time; a job held back until a running job ends (a concurrency limit, a
// sequence, a breaker's probe) is not counted at all: the store notifies
// listeners (Notifier) with the job's kind when a running job of a kind
// with a concurrency limit or a breaker leaves running, and when a
// sequence's next job becomes claimable, so hosts claim again then rather
// than poll.

// MaxPartitionKeyLength is the longest partition key and sequence key, in
// bytes.
const MaxPartitionKeyLength = 1024

// MaxRateInterval is the longest rate limit Period and breaker duration.
const MaxRateInterval = 366 * 24 * time.Hour

// PartitionSource says where a job's partition key comes from: exactly one
// of Metadata and PayloadField is set.
type PartitionSource struct {
	// Metadata names a metadata key: the partition key is its value.
	Metadata string `json:"metadata,omitempty"`
	// PayloadField names a top-level field of the payload (a JSON object):
	// the partition key is its value when it is a string, the number or
	// boolean as written otherwise.
	PayloadField string `json:"payload_field,omitempty"`
}

// IsZero reports whether no source is set.
func (p PartitionSource) IsZero() bool { return p.Metadata == "" && p.PayloadField == "" }

// Validate reports, wrapping ErrInvalidParams, the first problem with p:
// both fields set, or one that is not a text of at most MaxKindLength
// bytes. The zero PartitionSource is valid (no partitions).
func (p PartitionSource) Validate() error {
	if p.Metadata != "" && p.PayloadField != "" {
		return fmt.Errorf("%w: a partition source names a metadata key or a payload field, not both", ErrInvalidParams)
	}
	for _, s := range []string{p.Metadata, p.PayloadField} {
		if err := CheckText(s, MaxKindLength); err != nil {
			return fmt.Errorf("%w: partition source: %w", ErrInvalidParams, err)
		}
	}
	return nil
}

// PartitionKeyOf returns the partition key of a job with metadata md and
// payload under src: the metadata value, or the payload field's value (a
// string's content, a number's or boolean's JSON text as written). A
// missing key or field, a null, an object or an array, a payload that is
// not a JSON object, and a zero src all give "" (the jobs without a key
// share the partition ""). Where a field is repeated, the last one counts.
// A key that is not a storable text of at most MaxPartitionKeyLength bytes
// is an error wrapping ErrInvalidParams, and the job is refused. It is the
// reference stores follow.
func PartitionKeyOf(src PartitionSource, md map[string]string, payload json.RawMessage) (string, error) {
	var key string
	switch {
	case src.Metadata != "":
		key = md[src.Metadata]
	case src.PayloadField != "":
		var fields map[string]json.RawMessage
		if json.Unmarshal(payload, &fields) != nil {
			return "", nil // not an object
		}
		raw := fields[src.PayloadField]
		switch {
		case len(raw) == 0:
		case raw[0] == '"':
			if err := json.Unmarshal(raw, &key); err != nil {
				return "", fmt.Errorf("%w: payload field %q: %w", ErrInvalidParams, src.PayloadField, err)
			}
		case raw[0] == '{', raw[0] == '[', string(raw) == "null":
		default:
			key = string(raw) // a number or a boolean, as written
		}
	}
	if err := CheckText(key, MaxPartitionKeyLength); err != nil {
		return "", fmt.Errorf("%w: partition key: %w", ErrInvalidParams, err)
	}
	return key, nil
}

// RateLimit allows at most Limit starts in any window of Period (a
// sliding window, not only aligned ones). The zero RateLimit allows any
// rate.
//
// It is kept as a token bucket (GCRA) of Burst() tokens refilled one per
// Interval(): starts are spread over the period, at most Burst() at once,
// and the rate over a long run is (Limit − Burst() + 1) per Period — at
// least 98% of Limit per Period. With k starts in a window of length W,
// the bucket ensures (k − Burst())·Interval < W, so k ≤ Limit when W is
// Period.
type RateLimit struct {
	Limit  int           `json:"limit,omitempty"`
	Period time.Duration `json:"period,omitzero"`
}

// IsZero reports whether r limits nothing.
func (r RateLimit) IsZero() bool { return r.Limit == 0 && r.Period == 0 }

// Validate reports, wrapping ErrInvalidParams, the first problem with r: a
// Limit without a Period or the reverse, a negative one, a Period that is
// not a whole number of microseconds or longer than MaxRateInterval, or a
// rate above one start per microsecond per bucket.
func (r RateLimit) Validate() error {
	if r.IsZero() {
		return nil
	}
	switch {
	case r.Limit < 1 || r.Limit > math.MaxInt32:
		return fmt.Errorf("%w: rate limit %d not in [1, %d]", ErrInvalidParams, r.Limit, math.MaxInt32)
	case r.Period <= 0 || r.Period > MaxRateInterval || r.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: rate period %s is not a whole number of microseconds in (0, %s]", ErrInvalidParams, r.Period, MaxRateInterval)
	case r.Period/time.Microsecond < time.Duration(r.Limit-r.Burst()+1):
		return fmt.Errorf("%w: rate %d per %s is more than one start per microsecond", ErrInvalidParams, r.Limit, r.Period)
	}
	return nil
}

// Burst is how many starts the bucket allows at once: Limit/50, at least 1.
func (r RateLimit) Burst() int { return max(1, r.Limit/50) }

// Interval is the time one token takes to refill: Period / (Limit −
// Burst() + 1), rounded up to the microsecond.
func (r RateLimit) Interval() time.Duration {
	us := int64(r.Period / time.Microsecond)
	n := int64(r.Limit - r.Burst() + 1)
	return time.Duration((us+n-1)/n) * time.Microsecond
}

// Available returns how many starts a bucket whose theoretical arrival
// time is tat allows at now (from 0 to Burst()). A zero tat is a full
// bucket.
func (r RateLimit) Available(tat, now time.Time) int {
	if !tat.After(now) {
		return r.Burst()
	}
	t := r.Interval()
	n := (now.Sub(tat) + time.Duration(r.Burst())*t) / t // may be negative
	return int(max(0, min(n, time.Duration(r.Burst()))))
}

// Take returns the bucket's theoretical arrival time after n starts at now
// (n at most Available).
func (r RateLimit) Take(tat, now time.Time, n int) time.Time {
	if tat.Before(now) {
		tat = now
	}
	return tat.Add(time.Duration(n) * r.Interval())
}

// NextAt returns when a bucket whose theoretical arrival time is tat allows
// a start: at or before now when it allows one now.
func (r RateLimit) NextAt(tat time.Time) time.Time {
	if tat.IsZero() {
		return tat
	}
	return tat.Add(-time.Duration(r.Burst()-1) * r.Interval())
}

// BreakerConfig configures a kind's circuit breaker. It opens after
// Failures failed attempts in a row, or when at least MinAttempts attempts
// ended within a Window and a FailureRatio of them failed (whichever
// comes first; at least one of the two is set). While it is open no job
// of the kind starts; after CoolDown, one probe starts (half-open): its
// success closes the breaker, its failure opens it again for twice the
// previous cool-down, at most MaxCoolDown.
//
// An attempt counts as failed when it ends with OutcomeRetry or
// OutcomeDead, as succeeded with OutcomeSucceeded; snoozes, hand-backs,
// cancellations and rescued leases do not count.
type BreakerConfig struct {
	// Failures opens the breaker after this many failed attempts in a
	// row (0: not by count).
	Failures int `json:"failures,omitempty"`
	// FailureRatio opens it when at least this fraction, in (0, 1], of
	// the attempts that ended within one Window failed (0: not by ratio).
	FailureRatio float64 `json:"failure_ratio,omitempty"`
	// Window is the length of the ratio's windows: tumbling windows, the
	// first starting with the first attempt counted, each next one with
	// the first attempt after the previous one ended.
	Window time.Duration `json:"window,omitzero"`
	// MinAttempts is how many attempts a window needs before its ratio
	// counts (at least 1 with a ratio).
	MinAttempts int `json:"min_attempts,omitempty"`
	// CoolDown is how long the breaker stays open before a probe (> 0).
	CoolDown time.Duration `json:"cool_down"`
	// MaxCoolDown caps the cool-down, which doubles with every failed
	// probe (at least CoolDown).
	MaxCoolDown time.Duration `json:"max_cool_down"`
}

// IsZero reports whether c configures no breaker.
func (c *BreakerConfig) IsZero() bool { return *c == BreakerConfig{} }

// Validate reports, wrapping ErrInvalidParams, the first problem with c.
// The zero BreakerConfig is valid (no breaker).
func (c *BreakerConfig) Validate() error {
	if c.IsZero() {
		return nil
	}
	durations := []time.Duration{c.Window, c.CoolDown, c.MaxCoolDown}
	for _, d := range durations {
		if d < 0 || d > MaxRateInterval || d%time.Microsecond != 0 {
			return fmt.Errorf("%w: breaker duration %s is not a whole number of microseconds in [0, %s]", ErrInvalidParams, d, MaxRateInterval)
		}
	}
	switch {
	case c.Failures < 0 || c.Failures > math.MaxInt32:
		return fmt.Errorf("%w: breaker failures %d not in [0, %d]", ErrInvalidParams, c.Failures, math.MaxInt32)
	case math.IsNaN(c.FailureRatio) || c.FailureRatio < 0 || c.FailureRatio > 1:
		return fmt.Errorf("%w: breaker failure ratio %v not in [0, 1]", ErrInvalidParams, c.FailureRatio)
	case c.Failures == 0 && c.FailureRatio == 0:
		return fmt.Errorf("%w: a breaker opens on failures in a row, a failure ratio or both: neither is set", ErrInvalidParams)
	case c.FailureRatio > 0 && (c.Window <= 0 || c.MinAttempts < 1 || c.MinAttempts > math.MaxInt32):
		return fmt.Errorf("%w: a breaker failure ratio needs a Window > 0 and MinAttempts >= 1 (have %s, %d)", ErrInvalidParams, c.Window, c.MinAttempts)
	case c.FailureRatio == 0 && (c.Window != 0 || c.MinAttempts != 0):
		return fmt.Errorf("%w: breaker Window and MinAttempts need a FailureRatio", ErrInvalidParams)
	case c.CoolDown <= 0:
		return fmt.Errorf("%w: breaker cool-down %s <= 0", ErrInvalidParams, c.CoolDown)
	case c.MaxCoolDown < c.CoolDown:
		return fmt.Errorf("%w: breaker max cool-down %s is below its cool-down %s", ErrInvalidParams, c.MaxCoolDown, c.CoolDown)
	}
	return nil
}

// BreakerState is where a kind's circuit breaker is:
//
//	closed ──Failures in a row, or FailureRatio over a Window──▶ open (for CoolDown)
//	open ──CoolDown passed: a claim starts one probe──▶ half_open
//	half_open ──an attempt succeeds──▶ closed (cool-down back to CoolDown)
//	half_open ──an attempt fails──▶ open (for twice the last cool-down, at most MaxCoolDown)
//	half_open with no job of the kind running (the probe was handed back,
//	  snoozed, cancelled or rescued) ──▶ the next claim starts another probe
//	any ──SetBreaker(open)──▶ open (for CoolDown);  any ──SetBreaker(close)──▶ closed
//
// While open, attempts of the kind that were already running when it
// opened end without changing it; in half_open every attempt that ends is
// a verdict.
type BreakerState string

// Breaker states.
const (
	// BreakerClosed: jobs start as usual; attempts are counted.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: no job of the kind starts until BreakerStatus.ProbeAt.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: one probe runs (a claim starts one job of the kind
	// only while none runs); the next attempt to end decides.
	BreakerHalfOpen BreakerState = "half_open"
)

// BreakerStatus is a kind's circuit breaker as the store keeps it.
type BreakerStatus struct {
	// State is closed (the zero value reads as closed), open or half_open.
	State BreakerState `json:"state"`
	// Failures counts the failed attempts in a row, while closed.
	Failures int `json:"failures,omitempty"`
	// WindowStart is when the current ratio window began (zero: none);
	// WindowAttempts and WindowFailures count the attempts that ended in
	// it, and the failed ones.
	WindowStart    time.Time `json:"window_start,omitzero"`
	WindowAttempts int       `json:"window_attempts,omitempty"`
	WindowFailures int       `json:"window_failures,omitempty"`
	// OpenedAt is when the breaker last opened.
	OpenedAt time.Time `json:"opened_at,omitzero"`
	// ProbeAt is, while open, when the cool-down ends and a probe may
	// start.
	ProbeAt time.Time `json:"probe_at,omitzero"`
	// CoolDown is the cool-down of the current (or last) opening.
	CoolDown time.Duration `json:"cool_down,omitzero"`
	// ChangedAt is when the state last changed (zero: never).
	ChangedAt time.Time `json:"changed_at,omitzero"`
}

// Closed reports whether jobs start as usual.
func (b *BreakerStatus) Closed() bool { return b.State == "" || b.State == BreakerClosed }

// BreakerTransition is one change of a breaker's state, reported by the
// store call that made it (so that exactly one host reports each).
type BreakerTransition struct {
	Kind string `json:"kind"`
	// Partitioned reports a partition's breaker (FlowConfig.
	// PartitionBreaker), of the partition PartitionKey ("" is the
	// partition of the jobs without a key); false: the kind's.
	Partitioned  bool         `json:"partitioned,omitempty"`
	PartitionKey string       `json:"partition_key,omitempty"`
	From         BreakerState `json:"from"`
	To           BreakerState `json:"to"`
	// At is the store time of the change.
	At time.Time `json:"at"`
	// Reason says what made it ("5 failed attempts in a row", "probe
	// failed", "opened by hand", ...).
	Reason string `json:"reason"`
	// CoolDown is, for a change to open, how long it stays open.
	CoolDown time.Duration `json:"cool_down,omitzero"`
}

// Observe records an attempt that ended at now (failed or succeeded) and
// returns the transition it caused, or nil. It is the reference stores
// follow for Finish: outcomes of one call are observed in the call's
// order.
func (b *BreakerStatus) Observe(cfg *BreakerConfig, kind string, failed bool, now time.Time) *BreakerTransition {
	switch b.State {
	case BreakerOpen:
		return nil // attempts begun before it opened
	case BreakerHalfOpen:
		if failed {
			return b.open(cfg, kind, now, min(2*b.CoolDown, cfg.MaxCoolDown), "probe failed")
		}
		return b.close(kind, now, "probe succeeded")
	}
	if failed {
		b.Failures++
	} else {
		b.Failures = 0
	}
	if cfg.FailureRatio > 0 {
		if b.WindowStart.IsZero() || !now.Before(b.WindowStart.Add(cfg.Window)) {
			b.WindowStart, b.WindowAttempts, b.WindowFailures = now, 0, 0
		}
		b.WindowAttempts++
		if failed {
			b.WindowFailures++
		}
	}
	switch {
	case cfg.Failures > 0 && b.Failures >= cfg.Failures:
		return b.open(cfg, kind, now, cfg.CoolDown, fmt.Sprintf("%d failed attempts in a row", b.Failures))
	case cfg.FailureRatio > 0 && b.WindowAttempts >= cfg.MinAttempts &&
		float64(b.WindowFailures) >= cfg.FailureRatio*float64(b.WindowAttempts):
		return b.open(cfg, kind, now, cfg.CoolDown, fmt.Sprintf("%d of %d attempts failed within %s", b.WindowFailures, b.WindowAttempts, cfg.Window))
	}
	return nil
}

// Probe moves an open breaker whose cool-down has passed to half_open, as
// a claim does when it starts a probe, and returns the transition (nil
// when the breaker was half_open already).
func (b *BreakerStatus) Probe(kind string, now time.Time) *BreakerTransition {
	if b.State != BreakerOpen {
		return nil
	}
	t := &BreakerTransition{Kind: kind, From: BreakerOpen, To: BreakerHalfOpen, At: now, Reason: "cool-down passed: probe started"}
	b.State, b.ProbeAt, b.ChangedAt = BreakerHalfOpen, time.Time{}, now
	return t
}

// Set opens (for cfg.CoolDown) or closes the breaker by hand and returns
// the transition, or nil when it already was in that state.
func (b *BreakerStatus) Set(cfg *BreakerConfig, kind string, open bool, now time.Time) *BreakerTransition {
	switch {
	case open && b.State == BreakerOpen, !open && b.Closed():
		return nil
	case open:
		return b.open(cfg, kind, now, cfg.CoolDown, "opened by hand")
	}
	return b.close(kind, now, "closed by hand")
}

func (b *BreakerStatus) open(cfg *BreakerConfig, kind string, now time.Time, coolDown time.Duration, reason string) *BreakerTransition {
	coolDown = max(coolDown, cfg.CoolDown)
	t := &BreakerTransition{Kind: kind, From: b.state(), To: BreakerOpen, At: now, Reason: reason, CoolDown: coolDown}
	*b = BreakerStatus{State: BreakerOpen, OpenedAt: now, ProbeAt: now.Add(coolDown), CoolDown: coolDown, ChangedAt: now}
	return t
}

func (b *BreakerStatus) close(kind string, now time.Time, reason string) *BreakerTransition {
	t := &BreakerTransition{Kind: kind, From: b.state(), To: BreakerClosed, At: now, Reason: reason}
	*b = BreakerStatus{State: BreakerClosed, OpenedAt: b.OpenedAt, CoolDown: b.CoolDown, ChangedAt: now}
	return t
}

func (b *BreakerStatus) state() BreakerState {
	if b.State == "" {
		return BreakerClosed
	}
	return b.State
}

// FlowConfig is one kind's flow settings. The zero value (but Kind) sets
// nothing: the kind is not flow-controlled.
type FlowConfig struct {
	Kind string `json:"kind"`
	// Concurrency caps the kind's running jobs, cluster-wide (0: none).
	Concurrency int `json:"concurrency,omitempty"`
	// Partition says where jobs' partition keys come from; it is needed
	// by PartitionConcurrency and PartitionRate, and changes nothing
	// alone.
	Partition PartitionSource `json:"partition,omitzero"`
	// PartitionConcurrency caps the running jobs of each partition key
	// (0: none).
	PartitionConcurrency int `json:"partition_concurrency,omitempty"`
	// Rate limits the kind's starts.
	Rate RateLimit `json:"rate,omitzero"`
	// PartitionRate limits each partition's starts.
	PartitionRate RateLimit `json:"partition_rate,omitzero"`
	// Breaker configures the kind's circuit breaker (zero: none).
	Breaker BreakerConfig `json:"breaker,omitzero"`
	// PartitionBreaker configures a circuit breaker per partition (zero:
	// none; see PartitionBreakerStore): it needs a partition source, and
	// opens on Failures in a row only (no FailureRatio).
	PartitionBreaker BreakerConfig `json:"partition_breaker,omitzero"`
	// MaxPending makes Insert refuse rows of the kind while that many of
	// its jobs are pending (0: no bound).
	MaxPending int `json:"max_pending,omitempty"`
}

// IsZero reports whether c sets nothing.
func (c *FlowConfig) IsZero() bool {
	return c.Concurrency == 0 && c.Partition.IsZero() && c.PartitionConcurrency == 0 && c.Rate.IsZero() &&
		c.PartitionRate.IsZero() && c.Breaker.IsZero() && c.PartitionBreaker.IsZero() && c.MaxPending == 0
}

// Limits reports whether c holds back jobs until a running job ends (a
// concurrency limit or a breaker): the store then notifies listeners of
// the kind when one of its running jobs ends.
func (c *FlowConfig) Limits() bool {
	return c.Concurrency > 0 || c.PartitionConcurrency > 0 || !c.Breaker.IsZero() || !c.PartitionBreaker.IsZero()
}

// HoldsClaims reports whether c can hold a due job back from a claim:
// anything but a partition source (which only derives keys) and
// MaxPending (which applies to inserts).
func (c *FlowConfig) HoldsClaims() bool {
	return c.Limits() || !c.Rate.IsZero() || !c.PartitionRate.IsZero()
}

// Validate reports, wrapping ErrInvalidParams, the first problem with c.
func (c *FlowConfig) Validate() error {
	if c.Kind == "" {
		return fmt.Errorf("%w: flow settings of an empty kind", ErrInvalidParams)
	}
	if err := CheckText(c.Kind, MaxKindLength); err != nil {
		return fmt.Errorf("%w: flow kind: %w", ErrInvalidParams, err)
	}
	for _, n := range []int{c.Concurrency, c.PartitionConcurrency, c.MaxPending} {
		if n < 0 || n > math.MaxInt32 {
			return fmt.Errorf("%w: kind %q: flow limit %d not in [0, %d]", ErrInvalidParams, c.Kind, n, math.MaxInt32)
		}
	}
	if err := c.Partition.Validate(); err != nil {
		return fmt.Errorf("kind %q: %w", c.Kind, err)
	}
	if c.Partition.IsZero() && (c.PartitionConcurrency > 0 || !c.PartitionRate.IsZero()) {
		return fmt.Errorf("%w: kind %q: partition limits need a partition source", ErrInvalidParams, c.Kind)
	}
	for _, r := range []RateLimit{c.Rate, c.PartitionRate} {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("kind %q: %w", c.Kind, err)
		}
	}
	if err := c.Breaker.Validate(); err != nil {
		return fmt.Errorf("kind %q: %w", c.Kind, err)
	}
	if c.PartitionBreaker.IsZero() {
		return nil
	}
	switch {
	case c.Partition.IsZero():
		return fmt.Errorf("%w: kind %q: a partition breaker needs a partition source", ErrInvalidParams, c.Kind)
	case c.PartitionBreaker.FailureRatio != 0:
		return fmt.Errorf("%w: kind %q: a partition breaker opens on failures in a row only (no FailureRatio)", ErrInvalidParams, c.Kind)
	}
	if err := c.PartitionBreaker.Validate(); err != nil {
		return fmt.Errorf("kind %q: partition breaker: %w", c.Kind, err)
	}
	return nil
}

// SetFlowsParams declares kinds' flow settings.
type SetFlowsParams struct {
	// Node names the declaring host (stored as FlowState.DeclaredBy).
	Node string
	// Flows are the settings, at most one per kind.
	Flows []FlowConfig
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *SetFlowsParams) Validate() error {
	if err := CheckText(p.Node, MaxKindLength); err != nil {
		return fmt.Errorf("%w: node: %w", ErrInvalidParams, err)
	}
	seen := make(map[string]bool, len(p.Flows))
	for i := range p.Flows {
		if err := p.Flows[i].Validate(); err != nil {
			return err
		}
		if seen[p.Flows[i].Kind] {
			return fmt.Errorf("%w: kind %q declared twice", ErrInvalidParams, p.Flows[i].Kind)
		}
		seen[p.Flows[i].Kind] = true
	}
	return nil
}

// FlowState is a kind's flow settings and their state, as the store keeps
// them.
type FlowState struct {
	// Config is the kind's settings (Config.Kind names the kind).
	Config FlowConfig `json:"config"`
	// DeclaredBy names the host that stored Config, at DeclaredAt.
	DeclaredBy string    `json:"declared_by"`
	DeclaredAt time.Time `json:"declared_at"`
	// Breaker is the circuit breaker (closed when the kind has none).
	Breaker BreakerStatus `json:"breaker"`
	// PartitionBreakersOpen counts the kind's partitions whose breaker
	// (Config.PartitionBreaker) is open or half_open; their list is
	// PartitionBreakerStore.PartitionBreakers.
	PartitionBreakersOpen int `json:"partition_breakers_open,omitempty"`
	// Running counts the kind's running jobs, cluster-wide.
	Running int64 `json:"running"`
	// RateAvailable is how many starts the kind's rate limit allows at
	// Now, and RateNextAt, when it allows none, when it will allow one
	// (zero without a rate limit).
	RateAvailable int       `json:"rate_available,omitempty"`
	RateNextAt    time.Time `json:"rate_next_at,omitzero"`
	// Now is the store's clock at the reading.
	Now time.Time `json:"now"`
}

// NewFlowState returns a kind's FlowState at now from what a store keeps:
// its settings, who declared them and when, its breaker (one never set
// reads closed), its rate bucket's theoretical arrival time tat (zero: a
// full bucket) and its running jobs. Every store builds its FlowStates
// with it, so that they read the same.
func NewFlowState(cfg FlowConfig, declaredBy string, declaredAt time.Time, breaker BreakerStatus,
	tat time.Time, running int64, now time.Time) FlowState {
	st := FlowState{Config: cfg, DeclaredBy: declaredBy, DeclaredAt: declaredAt, Breaker: breaker, Running: running, Now: now}
	if st.Breaker.State == "" {
		st.Breaker.State = BreakerClosed
	}
	if r := cfg.Rate; !r.IsZero() {
		st.RateAvailable = r.Available(tat, now)
		if st.RateAvailable == 0 {
			st.RateNextAt = r.NextAt(tat)
		}
	}
	return st
}

// BreakerVerb names a SetBreaker call in messages: "open" or "close".
func BreakerVerb(open bool) string {
	if open {
		return "open"
	}
	return "close"
}

// CheckBreakerKind reports, wrapping ErrInvalidParams, a kind that a
// SetBreaker call cannot name (empty, or not a storable text); open says
// which call it was, for the message.
func CheckBreakerKind(kind string, open bool) error {
	verb := BreakerVerb(open)
	if kind == "" {
		return fmt.Errorf("%s breaker: %w: empty kind", verb, ErrInvalidParams)
	}
	if err := CheckText(kind, MaxKindLength); err != nil {
		return fmt.Errorf("%s breaker: %w: kind: %w", verb, ErrInvalidParams, err)
	}
	return nil
}

// SetBreakerResult is what SetBreaker did.
type SetBreakerResult struct {
	// State is the kind's flow state afterwards.
	State FlowState
	// Transition is the change made, or nil when the breaker already was
	// in the requested state.
	Transition *BreakerTransition
}

// FinishResult is what FinishFlow did.
type FinishResult struct {
	// OK reports, per row, whether it was applied (as Finish's ok).
	OK []bool
	// Breakers lists the breaker transitions the call made, in order.
	Breakers []BreakerTransition
}

// ErrPendingLimit is matched by a PendingLimitError.
var ErrPendingLimit = errors.New("ax/store: pending limit reached")

// PendingLimitError is returned by Insert (and InsertBatch) of a
// FlowStore when the call would take the pending jobs (scheduled and
// retrying, due or not) of a kind past its MaxPending, or of all kinds
// past a row's PendingLimit. Nothing was inserted. It matches
// ErrPendingLimit.
type PendingLimitError struct {
	// Kind is the kind whose bound was reached; empty for PendingLimit,
	// the bound on all kinds.
	Kind string
	// Pending is how many pending jobs the store counted. Stores may stop
	// counting at Limit, so it is at most Limit.
	Pending int
	// Limit is the bound.
	Limit int
}

// Error implements error.
func (e *PendingLimitError) Error() string {
	what := "all kinds"
	if e.Kind != "" {
		what = fmt.Sprintf("kind %q", e.Kind)
	}
	return fmt.Sprintf("%s: %d pending job(s) of %s, limit %d", ErrPendingLimit, e.Pending, what, e.Limit)
}

// Unwrap returns ErrPendingLimit.
func (e *PendingLimitError) Unwrap() error { return ErrPendingLimit }

// FlowStore is implemented by stores that apply flow control (see the
// top of this file): they keep kinds' flow settings and state, apply them
// in Insert, Claim, Finish and RescueExpired, and honour
// InsertParams.SequenceKey and PendingLimit and ClaimParams.AgeAfter.
//
// Claim, in addition to Store.Claim's rules, takes a job only when:
//
//   - its kind runs fewer than Concurrency jobs and its partition fewer
//     than PartitionConcurrency, counting the jobs the claim takes;
//   - the kind's rate bucket, and its partition's, hold a token (each
//     start takes one);
//   - the kind's breaker is closed, or it is half_open or open past its
//     cool-down and no job of the kind runs (the claim then starts one
//     probe, moving open to half_open, and reports the transition in
//     ClaimResult.Breakers);
//   - it has no SequenceKey, or it is the first of the live jobs of its
//     kind and key in (ScheduledAt, ID) order and none of them runs.
//
// Jobs whose run_at is at or before now − AgeAfter are claimed first,
// oldest first whatever their priority; then the others by priority and
// run_at. A job held back does not keep the claim from taking others.
type FlowStore interface {
	// SetFlows stores each kind's settings in place of what was stored
	// (the last writer wins). A config that sets nothing removes the
	// kind's settings and state. A kind's breaker state is kept while it
	// keeps a breaker, and its rate buckets while it keeps a rate.
	// Invalid params fail with ErrInvalidParams and change nothing.
	SetFlows(ctx context.Context, params *SetFlowsParams) error

	// Flows returns the state of every kind with stored settings, ordered
	// by kind.
	Flows(ctx context.Context) ([]FlowState, error)

	// SetBreaker opens (open = true, for the kind's CoolDown) or closes
	// the kind's breaker by hand. It fails with ErrNotFound when the kind
	// has no breaker, ErrInvalidParams for a kind that is not a storable
	// text. Closing notifies listeners of the kind.
	SetBreaker(ctx context.Context, kind string, open bool) (*SetBreakerResult, error)

	// FinishFlow is Finish, also reporting the breaker transitions the
	// outcomes made. Finish of a FlowStore feeds the breakers the same
	// way, without reporting.
	FinishFlow(ctx context.Context, params []FinishParams) (*FinishResult, error)
}
