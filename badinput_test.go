package ax_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/stretchr/testify/require"
)

// TestScheduleRejectsBadInput checks each bad Schedule call returns a
// matchable error and leaves the store untouched.
func TestScheduleRejectsBadInput(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		payload any
		opts    []ax.ScheduleOption
		want    error
	}{
		{"empty kind", "", nil, nil, ax.ErrInvalidKind},
		{"overlong kind", strings.Repeat("k", store.MaxKindLength+1), nil, nil, ax.ErrInvalidKind},
		{"unencodable payload", "k", make(chan int), nil, ax.ErrInvalidPayload},
		{"invalid raw JSON", "k", json.RawMessage("{"), nil, ax.ErrInvalidPayload},
		{"oversize payload", "k", strings.Repeat("x", store.MaxPayloadSize), nil, ax.ErrInvalidPayload},
		{"negative delay", "k", nil, []ax.ScheduleOption{ax.In(-time.Second)}, ax.ErrInvalidOption},
		{"zero At", "k", nil, []ax.ScheduleOption{ax.At(time.Time{})}, ax.ErrInvalidOption},
		{"priority too low", "k", nil, []ax.ScheduleOption{ax.Priority(0)}, ax.ErrInvalidOption},
		{"priority too high", "k", nil, []ax.ScheduleOption{ax.Priority(4)}, ax.ErrInvalidOption},
		{"zero max attempts", "k", nil, []ax.ScheduleOption{ax.MaxAttempts(0)}, ax.ErrInvalidOption},
		{"empty unique key", "k", nil, []ax.ScheduleOption{ax.UniqueKey("")}, ax.ErrInvalidOption},
		{"nil option", "k", nil, []ax.ScheduleOption{nil}, ax.ErrInvalidOption},
		// Defect 8 of the hardening issue: input PostgreSQL cannot store.
		{"kind invalid UTF-8", "odd\xffkind", nil, nil, ax.ErrInvalidKind},
		{"kind NUL", "odd\x00kind", nil, nil, ax.ErrInvalidKind},
		{"unique key invalid UTF-8", "k", nil, []ax.ScheduleOption{ax.UniqueKey("key\xff")}, ax.ErrInvalidOption},
		{"unique key NUL", "k", nil, []ax.ScheduleOption{ax.UniqueKey("key\x00")}, ax.ErrInvalidOption},
		{"unique key overlong", "k", nil, []ax.ScheduleOption{ax.UniqueKey(strings.Repeat("u", store.MaxUniqueKeyLength+1))}, ax.ErrInvalidOption},
		{"unique key reserved prefix", "k", nil, []ax.ScheduleOption{ax.UniqueKey("periodic:x:2026-01-01T00:00:00Z")}, ax.ErrInvalidOption},
		{"metadata key invalid UTF-8", "k", nil, []ax.ScheduleOption{ax.Metadata(map[string]string{"\xff": "v"})}, ax.ErrInvalidOption},
		{"metadata value NUL", "k", nil, []ax.ScheduleOption{ax.Metadata(map[string]string{"k": "v\x00"})}, ax.ErrInvalidOption},
		{"metadata empty key", "k", nil, []ax.ScheduleOption{ax.Metadata(map[string]string{"": "v"})}, ax.ErrInvalidOption},
		{"metadata oversize", "k", nil, []ax.ScheduleOption{ax.Metadata(map[string]string{"k": strings.Repeat("v", store.MaxMetadataSize)})}, ax.ErrInvalidOption},
		{"raw payload invalid UTF-8", "k", json.RawMessage("\"\xff\""), nil, ax.ErrInvalidPayload},
		{"At year 300000", "k", nil, []ax.ScheduleOption{ax.At(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC))}, ax.ErrInvalidOption},
		{"At year 0", "k", nil, []ax.ScheduleOption{ax.At(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))}, ax.ErrInvalidOption},
		{"unique scope without key", "k", nil, []ax.ScheduleOption{ax.UniqueGlobal()}, ax.ErrInvalidOption},
		{"unique for 0", "k", nil, []ax.ScheduleOption{ax.UniqueKey("k"), ax.UniqueFor(0)}, ax.ErrInvalidOption},
		{"unique for 1500ms", "k", nil, []ax.ScheduleOption{ax.UniqueKey("k"), ax.UniqueFor(1500 * time.Millisecond)}, ax.ErrInvalidOption},
		{"unique for 2 years", "k", nil, []ax.ScheduleOption{ax.UniqueKey("k"), ax.UniqueFor(2 * 365 * 24 * time.Hour)}, ax.ErrInvalidOption},
		// Defect 9: a MaxAttempts a 32-bit column would truncate.
		{"max attempts above MaxInt32", "k", nil, []ax.ScheduleOption{ax.MaxAttempts(math.MaxInt32 + 1)}, ax.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newMemstore()
			s := newScheduler(t, st)
			_, err := s.Schedule(context.Background(), tt.kind, tt.payload, tt.opts...)
			require.ErrorIs(t, err, tt.want)
			_, err = s.ScheduleMany(context.Background(), []ax.Request{{Kind: "ok"}, {Kind: tt.kind, Payload: tt.payload, Options: tt.opts}})
			require.ErrorIs(t, err, tt.want)
			counts, err := st.CountJobs(context.Background())
			require.NoError(t, err)
			require.Empty(t, counts, "nothing stored")
		})
	}
}

// TestHandleRejectsBadInput checks each bad Handle call returns a
// matchable error and registers nothing.
func TestHandleRejectsBadInput(t *testing.T) {
	ok := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	tests := []struct {
		name    string
		kind    string
		handler ax.JobHandler
		opts    []ax.HandlerOption
		want    error
	}{
		{"empty kind", "", ok, nil, ax.ErrInvalidKind},
		{"nil handler", "k", nil, nil, ax.ErrInvalidOption},
		{"zero concurrency", "k", ok, []ax.HandlerOption{ax.Concurrency(0)}, ax.ErrInvalidOption},
		{"negative concurrency", "k", ok, []ax.HandlerOption{ax.Concurrency(-1)}, ax.ErrInvalidOption},
		{"zero timeout", "k", ok, []ax.HandlerOption{ax.Timeout(0)}, ax.ErrInvalidOption},
		{"negative timeout", "k", ok, []ax.HandlerOption{ax.Timeout(-time.Second)}, ax.ErrInvalidOption},
		{"zero max attempts", "k", ok, []ax.HandlerOption{ax.MaxAttempts(0)}, ax.ErrInvalidOption},
		{"bad priority", "k", ok, []ax.HandlerOption{ax.Priority(9)}, ax.ErrInvalidOption},
		{"nil retry policy", "k", ok, []ax.HandlerOption{ax.Retry(nil)}, ax.ErrInvalidOption},
		{"nil middleware", "k", ok, []ax.HandlerOption{ax.Use(nil)}, ax.ErrInvalidOption},
		{"kind invalid UTF-8", "odd\xffkind", ok, nil, ax.ErrInvalidKind},
		{"kind NUL", "odd\x00kind", ok, nil, ax.ErrInvalidKind},
		{"max attempts above MaxInt32", "k", ok, []ax.HandlerOption{ax.MaxAttempts(math.MaxInt32 + 1)}, ax.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(t, newMemstore())
			require.ErrorIs(t, s.Handle(tt.kind, tt.handler, tt.opts...), tt.want)
			// Nothing was registered: a valid Handle for the kind works.
			require.NoError(t, s.Handle("k", ok))
		})
	}
}

// TestHandleTwice checks a second handler for one kind is refused.
func TestHandleTwice(t *testing.T) {
	s := newScheduler(t, newMemstore())
	h := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	require.NoError(t, s.Handle("k", h))
	require.ErrorIs(t, s.Handle("k", h), ax.ErrDuplicateHandler)
}

// TestCallsAfterStop checks every call after Stop returns
// ErrSchedulerClosed and stores nothing, and Stop is safe twice.
func TestCallsAfterStop(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	start(t, s)
	ctx := context.Background()
	require.NoError(t, s.Stop(ctx))
	require.NoError(t, s.Stop(ctx), "second Stop")

	_, err := s.Schedule(ctx, "k", nil)
	require.ErrorIs(t, err, ax.ErrSchedulerClosed)
	_, err = s.ScheduleMany(ctx, []ax.Request{{Kind: "k"}})
	require.ErrorIs(t, err, ax.ErrSchedulerClosed)
	require.ErrorIs(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })), ax.ErrSchedulerClosed)
	require.ErrorIs(t, s.Start(ctx), ax.ErrSchedulerClosed)
	counts, err := st.CountJobs(ctx)
	require.NoError(t, err)
	require.Empty(t, counts)
}

// TestStopBeforeStart checks Stop on a Scheduler never started.
func TestStopBeforeStart(t *testing.T) {
	s := newScheduler(t, newMemstore())
	require.NoError(t, s.Stop(context.Background()))
	require.ErrorIs(t, s.Start(context.Background()), ax.ErrSchedulerClosed)
}

// TestDefect9NilContext: a nil context is refused with an error instead of
// panicking in the store (Stop treats it as context.Background()).
func TestDefect9NilContext(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	//nolint:staticcheck // passing nil is what is tested
	var nilCtx context.Context
	_, err := s.Schedule(nilCtx, "k", nil)
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	_, err = s.ScheduleMany(nilCtx, []ax.Request{{Kind: "k"}})
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	_, err = s.Get(nilCtx, uuid.Must(uuid.NewV7()))
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	_, err = s.Cancel(nilCtx, uuid.Must(uuid.NewV7()))
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	require.ErrorIs(t, s.Start(nilCtx), ax.ErrInvalidOption)
	counts, err := st.CountJobs(context.Background())
	require.NoError(t, err)
	require.Empty(t, counts)
	require.NoError(t, s.Stop(nilCtx))
}

// TestDefect9BackoffOverflow: a huge Max must not overflow the doubling
// into a negative bound (which made every retry immediate).
func TestDefect9BackoffOverflow(t *testing.T) {
	b := ax.ExponentialBackoff{Base: time.Second, Max: math.MaxInt64}
	prev := time.Duration(0)
	for attempt := 1; attempt <= 200; attempt++ {
		bound := b.Bound(attempt)
		require.GreaterOrEqual(t, bound, prev, "attempt %d", attempt)
		prev = bound
		d := b.NextRetry(attempt, nil)
		require.GreaterOrEqual(t, d, time.Duration(0), "attempt %d", attempt)
		require.LessOrEqual(t, d, bound, "attempt %d", attempt)
	}
	require.Equal(t, time.Duration(math.MaxInt64), b.Bound(200))
}

// TestScheduleTxNeedsCapableStore checks memstore refuses ScheduleTx.
func TestScheduleTxNeedsCapableStore(t *testing.T) {
	s := newScheduler(t, newMemstore())
	_, err := s.ScheduleTx(context.Background(), nil, "k", nil)
	require.ErrorIs(t, err, ax.ErrTxUnsupported)
}

// TestNewRejectsBadConfig checks Config validation.
func TestNewRejectsBadConfig(t *testing.T) {
	st := newMemstore()
	tests := []struct {
		name string
		cfg  ax.Config
	}{
		{"no store", ax.Config{}},
		{"negative workers", ax.Config{Store: st, Workers: -1}},
		{"negative max attempts", ax.Config{Store: st, MaxAttempts: -1}},
		{"negative lease", ax.Config{Store: st, LeaseDuration: -time.Second}},
		{"negative poll", ax.Config{Store: st, PollInterval: -time.Second}},
		{"heartbeat not below lease", ax.Config{Store: st, LeaseDuration: time.Second, HeartbeatInterval: time.Second}},
		{"nil middleware", ax.Config{Store: st, Middleware: []ax.Middleware{nil}}},
		// Defect 8: a node name PostgreSQL cannot store, or too long for
		// the node registry.
		{"node invalid UTF-8", ax.Config{Store: st, Node: "host\xff"}},
		{"node NUL", ax.Config{Store: st, Node: "host\x00"}},
		{"node 300 bytes", ax.Config{Store: st, Node: strings.Repeat("n", 300)}},
		{"version invalid UTF-8", ax.Config{Store: st, Version: "v\xff"}},
		// Defect 9: ticker intervals that would round to zero and panic,
		// and counts that overflow.
		{"lease 1ns", ax.Config{Store: st, LeaseDuration: time.Nanosecond}},
		{"lease below minimum", ax.Config{Store: st, LeaseDuration: ax.MinLeaseDuration - 1}},
		{"leader TTL 2ns", ax.Config{Store: st, LeaderTTL: 2 * time.Nanosecond}},
		{"workers above max", ax.Config{Store: st, Workers: ax.MaxWorkers + 1}},
		{"max attempts above MaxInt32", ax.Config{Store: st, MaxAttempts: math.MaxInt32 + 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ax.New(tt.cfg)
			require.ErrorIs(t, err, ax.ErrInvalidConfig)
		})
	}
}
