package ax_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ax.New(tt.cfg)
			require.ErrorIs(t, err, ax.ErrInvalidConfig)
		})
	}
}
