package ax

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// Flow control across the cluster. Concurrency caps one kind on one host;
// the options here hold for the whole cluster, because the store applies
// them where jobs start, end and arrive (store.FlowStore; memstore,
// sqlitestore and pgstore implement it):
//
//	ax.Handle(s, "invoice.render", render,
//		ax.GlobalConcurrency(20),                                  // at most 20 running, all hosts together
//		ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 2}), // and 2 per tenant
//		ax.RateLimit(100, time.Second),                            // at most 100 starts in any second
//		ax.CircuitBreaker(ax.BreakerConfig{Failures: 5}),          // stop starting after 5 failures in a row
//		ax.MaxPending(10_000))                                     // Schedule refuses past 10,000 waiting
//
// Jobs held back wait in the store as they are (scheduled or retrying,
// attempts untouched) and start as soon as they may: a host learns when
// (the next rate token, the end of a breaker's cool-down) from its claim
// and wakes then, and a job held until a running one ends starts when the
// store notifies that it ended. Nothing polls.
//
// The settings are declared by the hosts that handle the kind, when they
// start (or when Handle runs after Start), and stored: the last host to
// start decides. During a rolling deploy that changes a kind's options,
// the old settings hold until the first new host starts; hosts that
// handle a kind without options remove its settings. Hosts that only
// schedule jobs need no options: the store applies the settings to their
// jobs too.

// GlobalConcurrency caps how many jobs of the kind run at once across the
// whole cluster (Concurrency caps one host). A job over the cap waits and
// starts when a running one ends, on whichever host; a slot held by a
// host that died frees when its job's lease is rescued. n < 1 is an error
// wrapping ErrInvalidOption.
func GlobalConcurrency(n int) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		if n < 1 {
			return fmt.Errorf("%w: GlobalConcurrency(%d) < 1", ErrInvalidOption, n)
		}
		h.flow.Concurrency, h.flowSet = n, true
		return nil
	})
}

// PartitionSource says where a job's partition key comes from: made by
// PartitionByMetadata or PartitionByPayloadField.
type PartitionSource struct{ src store.PartitionSource }

// PartitionByMetadata takes a job's partition key from its metadata value
// at key (see Metadata).
func PartitionByMetadata(key string) PartitionSource {
	return PartitionSource{store.PartitionSource{Metadata: key}}
}

// PartitionByPayloadField takes a job's partition key from the top-level
// field of its JSON payload: a string's content, or a number or boolean as
// written.
func PartitionByPayloadField(field string) PartitionSource {
	return PartitionSource{store.PartitionSource{PayloadField: field}}
}

// PartitionLimit is what PartitionBy allows each partition: at most
// Concurrency jobs running at once, and at most Rate starts in any window
// of Per. Set Concurrency, or Rate and Per, or both; a zero field limits
// nothing (a zero Rate is no rate limit, whatever Per says).
type PartitionLimit struct {
	Concurrency int
	Rate        int
	Per         time.Duration
}

// PartitionBy splits the kind's jobs into partitions (per tenant, per
// customer...) and limits each one, cluster-wide: a busy partition waits
// while the others go on. Each job's key is read from its metadata or
// payload (src) when it is scheduled; jobs without one share the
// partition "". A key longer than 1,024 bytes fails Schedule. The
// kind's GlobalConcurrency and RateLimit apply on top.
//
// A source with an empty name, a limit that sets nothing (neither
// Concurrency nor Rate), or one with a negative value or a Rate without
// Per, is an error wrapping ErrInvalidOption.
func PartitionBy(src PartitionSource, limit PartitionLimit) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		switch {
		case src.src.IsZero():
			return fmt.Errorf("%w: PartitionBy needs a metadata key or a payload field", ErrInvalidOption)
		case limit.Concurrency == 0 && limit.Rate == 0:
			return fmt.Errorf("%w: PartitionBy without a limit (set PartitionLimit.Concurrency or Rate and Per)", ErrInvalidOption)
		case limit.Concurrency < 0:
			return fmt.Errorf("%w: PartitionLimit.Concurrency %d < 0", ErrInvalidOption, limit.Concurrency)
		}
		per := limit.Per
		if limit.Rate == 0 && per > 0 {
			per = 0 // a zero Rate limits nothing: its window is moot
		}
		rate, err := rateLimit("PartitionLimit", limit.Rate, per, true)
		if err != nil {
			return err
		}
		if err := h.setPartition("PartitionBy", src); err != nil {
			return err
		}
		h.flow.PartitionConcurrency, h.flow.PartitionRate = limit.Concurrency, rate
		h.flowSet = true
		return nil
	})
}

// setPartition sets the kind's partition source, which option names; a
// source another option set already must be the same (PartitionBy and
// PartitionBreaker share it): otherwise an error wrapping
// ErrInvalidOption.
func (h *handlerSettings) setPartition(option string, src PartitionSource) error {
	if !h.flow.Partition.IsZero() && h.flow.Partition != src.src {
		return fmt.Errorf("%w: %s partitions by %+v, another option by %+v: the kind has one partition source",
			ErrInvalidOption, option, src.src, h.flow.Partition)
	}
	h.flow.Partition = src.src
	return nil
}

// RateLimit allows the kind at most n starts in any window of length per,
// across the cluster (a sliding window: no second holds more than n with
// RateLimit(n, time.Second), however the seconds are cut). Jobs over it
// wait and start as soon as the window allows. Starts are spread over the
// window, at most max(1, n/50) at once, and the rate over a long run is at
// least 98% of n per per. n < 1, per <= 0, a per that is not a whole
// number of microseconds, or more than a million starts per second is an
// error wrapping ErrInvalidOption.
func RateLimit(n int, per time.Duration) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		rate, err := rateLimit("RateLimit", n, per, false)
		if err != nil {
			return err
		}
		h.flow.Rate, h.flowSet = rate, true
		return nil
	})
}

// rateLimit validates a rate option; optional lets n and per both be zero.
func rateLimit(what string, n int, per time.Duration, optional bool) (store.RateLimit, error) {
	if optional && n == 0 && per == 0 {
		return store.RateLimit{}, nil
	}
	if n < 1 || per <= 0 {
		return store.RateLimit{}, fmt.Errorf("%w: %s(%d, %s): want n >= 1 and per > 0", ErrInvalidOption, what, n, per)
	}
	r := store.RateLimit{Limit: n, Period: per}
	if err := r.Validate(); err != nil {
		return store.RateLimit{}, fmt.Errorf("%w: %s: %s", ErrInvalidOption, what, unwrapParams(err))
	}
	return r, nil
}

// MaxPending bounds the kind's pending jobs (scheduled or retrying, due or
// not): Schedule of the kind, by any process, returns an error matching
// ErrBackpressure (a *BackpressureError) once n are pending, or waits for
// room with WaitForCapacity. Checking costs the store a bounded count (at
// most n index entries), never a count of the table. Racing producers can
// overshoot by at most one job each. Config.MaxPending bounds all kinds
// together. n < 1 is an error wrapping ErrInvalidOption.
func MaxPending(n int) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		if n < 1 || n > store.MaxAttemptsLimit {
			return fmt.Errorf("%w: MaxPending(%d) not in [1, %d]", ErrInvalidOption, n, store.MaxAttemptsLimit)
		}
		h.flow.MaxPending, h.flowSet = n, true
		return nil
	})
}

// Sequential makes the job one of a sequence: jobs of the same kind with
// the same key run one at a time, across the cluster, in the order of
// their scheduled time (Job.ScheduledAt, then ID). A job waits while an
// earlier one of its sequence is live: running, waiting to retry, paused
// (a paused job holds its sequence until resumed or cancelled) or simply
// not yet due. A job that ends for good (succeeded, dead or cancelled)
// lets the next one start. The key must be valid UTF-8 without NUL bytes,
// 1 to 1,024 bytes; otherwise it is an error wrapping ErrInvalidOption.
// Stores without flow control refuse it (errors.ErrUnsupported).
func Sequential(key string) ScheduleOption {
	return scheduleOptionFunc(func(s *scheduleSettings) error {
		if key == "" {
			return fmt.Errorf("%w: empty Sequential key", ErrInvalidOption)
		}
		if err := store.CheckText(key, store.MaxPartitionKeyLength); err != nil {
			return fmt.Errorf("%w: Sequential key: %w", ErrInvalidOption, err)
		}
		s.sequenceKey = key
		return nil
	})
}

// FlowState is a kind's flow settings and their state in the store, as
// Admin.Flows and Stats.Flows report them: the settings (Config), which
// host declared them and when, the breaker, the kind's running jobs
// cluster-wide and what its rate limit allows now.
type FlowState = store.FlowState

// flowStore returns the store's FlowStore, or an error wrapping
// errors.ErrUnsupported.
func flowStoreOf(st store.Store) (store.FlowStore, error) {
	fs, ok := st.(store.FlowStore)
	if !ok {
		return nil, fmt.Errorf("store %T has no flow control (store.FlowStore): %w", st, errors.ErrUnsupported)
	}
	return fs, nil
}

// unwrapParams returns the message of a store validation error without
// its sentinel prefix, for errors rewrapped with ErrInvalidOption.
func unwrapParams(err error) string {
	msg := err.Error()
	prefix := store.ErrInvalidParams.Error() + ": "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}

// flowConfig returns the kind's flow settings as the store keeps them
// (zero but Kind when it has none).
func (h *kindHandler) flowConfig() store.FlowConfig {
	cfg := h.settings.flow
	cfg.Kind = h.kind
	return cfg
}

// declareFlows stores the flow settings of handlers, with a FlowStore:
// each kind's options, or none (which removes what another host stored).
func (s *Scheduler) declareFlows(ctx context.Context, handlers []*kindHandler) error {
	fs, ok := s.store.(store.FlowStore)
	if !ok || len(handlers) == 0 {
		return nil
	}
	slices.SortFunc(handlers, func(a, b *kindHandler) int { return strings.Compare(a.kind, b.kind) })
	p := &store.SetFlowsParams{Node: s.cfg.Node}
	for _, h := range handlers {
		p.Flows = append(p.Flows, h.flowConfig())
	}
	if err := fs.SetFlows(ctx, p); err != nil {
		return fmt.Errorf("declare flow settings: %w", err)
	}
	for _, h := range handlers {
		if h.settings.flowSet {
			s.log.Info("flow settings declared", zap.String(fieldKind, h.kind), zap.Any("flow", h.settings.flow))
		}
	}
	return nil
}

// Flows returns the flow settings and state of every kind that has some
// (store.FlowStore), ordered by kind: limits, the host that declared them,
// the breaker, the running jobs cluster-wide and the rate limit's tokens.
// It returns an error wrapping errors.ErrUnsupported when the store has no
// flow control.
func (a *Admin) Flows(ctx context.Context) ([]FlowState, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	fs, err := flowStoreOf(a.store)
	if err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	flows, err := fs.Flows(ctx)
	if err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	return flows, nil
}
