package axotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axotel"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestTraceMemstore: the trace of the Schedule call continues in the
// handler, on memstore.
func TestTraceMemstore(t *testing.T) {
	testTraceRoundTrip(t, memstore.New())
}

// TestTracePostgres: the trace survives a real PostgreSQL round trip (the
// metadata is written to and read back from the jobs table).
func TestTracePostgres(t *testing.T) {
	pool := pgtest.Pool(t) // skips without a server, like every Postgres test
	st, err := pgstore.New(context.Background(), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	testTraceRoundTrip(t, st)
}

// testTraceRoundTrip schedules a job inside a span and checks the
// handler's span: same trace, child of the scheduling span, attributes;
// and the trace ID in the Scheduler's logs.
func testTraceRoundTrip(t *testing.T, st store.Store) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	logs, logged := observer.New(zapcore.DebugLevel)
	done := make(chan ax.Event, 1)
	s, err := ax.New(ax.Config{
		Store:               st,
		Logger:              zap.New(logs),
		PollInterval:        50 * time.Millisecond,
		MetadataFromContext: axotel.MetadataFromContext,
		Middleware:          []ax.Middleware{axotel.Middleware(tp)},
		Observers: []ax.Observer{ax.ObserverFunc(func(e ax.Event) {
			if e.Kind == ax.EventSucceeded {
				done <- e
			}
		})},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	inHandler := make(chan trace.SpanContext, 1)
	require.NoError(t, s.Handle("mail", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
		inHandler <- trace.SpanContextFromContext(ctx)
		return nil
	})))
	require.NoError(t, s.Start(context.Background()))

	ctx, parent := tp.Tracer("test").Start(context.Background(), "http request")
	res, err := s.Schedule(ctx, "mail", map[string]string{"to": "a@example.com"})
	require.NoError(t, err)
	parent.End()

	var handlerSC trace.SpanContext
	select {
	case handlerSC = <-inHandler:
	case <-time.After(20 * time.Second):
		t.Fatal("handler not called")
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("job not finished")
	}
	want := parent.SpanContext()
	require.True(t, handlerSC.IsValid())
	require.Equal(t, want.TraceID(), handlerSC.TraceID(), "the handler runs in the trace of Schedule")

	var job sdktrace.ReadOnlySpan
	for _, sp := range sr.Ended() {
		if sp.Name() == "ax.job mail" {
			job = sp
		}
	}
	require.NotNil(t, job, "the attempt's span was ended before the outcome")
	require.Equal(t, handlerSC.SpanID(), job.SpanContext().SpanID())
	require.Equal(t, want.SpanID(), job.Parent().SpanID(), "child of the scheduling span")
	require.True(t, job.Parent().IsRemote())
	require.Equal(t, trace.SpanKindConsumer, job.SpanKind())
	require.ElementsMatch(t, []attribute.KeyValue{
		axotel.AttrKind.String("mail"),
		axotel.AttrID.String(res.ID.String()),
		axotel.AttrAttempt.Int(1),
		axotel.AttrOutcome.String("succeeded"),
	}, job.Attributes())
	require.Equal(t, codes.Unset, job.Status().Code)

	started := logged.FilterMessage("job started").All()
	require.Len(t, started, 1)
	require.Equal(t, want.TraceID().String(), started[0].ContextMap()["trace_id"], "logs carry the trace ID")
}

// TestMetadataFromContext: traceparent and tracestate are written; a
// context without a span gives nothing.
func TestMetadataFromContext(t *testing.T) {
	require.Nil(t, axotel.MetadataFromContext(context.Background()))

	ts, err := trace.ParseTraceState("vendor=abc")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	md := axotel.MetadataFromContext(trace.ContextWithSpanContext(context.Background(), sc))
	require.Equal(t, map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "vendor=abc",
	}, md)

	got := trace.SpanContextFromContext(axotel.ContextWithJob(context.Background(), &ax.Job{Metadata: md}))
	require.Equal(t, sc.WithRemote(true), got)
}

// TestMiddlewareOutcomes: each kind of handler result gives its outcome
// attribute and status.
func TestMiddlewareOutcomes(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		attempt int
		cause   error // the handler context's cancel cause
		err     error
		outcome string
		status  codes.Code
	}{
		{name: "success", attempt: 1, outcome: "succeeded", status: codes.Unset},
		{name: "retry", attempt: 1, err: boom, outcome: "retry", status: codes.Error},
		{name: "last attempt", attempt: 3, err: boom, outcome: "dead", status: codes.Error},
		{name: "permanent", attempt: 1, err: ax.Permanent(boom), outcome: "dead", status: codes.Error},
		{name: "snooze", attempt: 1, err: ax.Snooze(time.Minute), outcome: "snoozed", status: codes.Unset},
		{name: "cancelled", attempt: 1, cause: ax.ErrJobCancelled, err: context.Canceled, outcome: "cancelled", status: codes.Unset},
		{name: "lease lost", attempt: 1, cause: ax.ErrLeaseLost, err: context.Canceled, outcome: "lease_lost", status: codes.Error},
		{name: "stopping", attempt: 1, cause: ax.ErrStopping, err: context.Canceled, outcome: "stopping", status: codes.Unset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			ctx := context.Background()
			if tt.cause != nil {
				cancelled, cancel := context.WithCancelCause(ctx)
				cancel(tt.cause)
				ctx = cancelled
			}
			h := axotel.Middleware(tp)(ax.HandlerFunc(func(context.Context, *ax.Job) error { return tt.err }))
			job := &ax.Job{ID: uuid.Must(uuid.NewV7()), Kind: "mail", Attempt: tt.attempt, MaxAttempts: 3, Metadata: map[string]string{}}
			require.Equal(t, tt.err, h.Work(ctx, job))
			spans := sr.Ended()
			require.Len(t, spans, 1)
			require.Contains(t, spans[0].Attributes(), axotel.AttrOutcome.String(tt.outcome))
			require.Equal(t, tt.status, spans[0].Status().Code)
			require.False(t, spans[0].Parent().IsValid(), "no trace in the metadata: a root span")
		})
	}
}

// TestMiddlewarePanic: a panicking handler's span is ended with an error
// and the panic goes on to the Scheduler.
func TestMiddlewarePanic(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	h := axotel.Middleware(tp)(ax.HandlerFunc(func(context.Context, *ax.Job) error { panic("kaboom") }))
	require.PanicsWithValue(t, "kaboom", func() {
		_ = h.Work(context.Background(), &ax.Job{Kind: "mail", Attempt: 1, MaxAttempts: 3})
	})
	spans := sr.Ended()
	require.Len(t, spans, 1)
	require.Contains(t, spans[0].Attributes(), axotel.AttrOutcome.String("panic"))
	require.Equal(t, codes.Error, spans[0].Status().Code)
	require.Equal(t, "panic: kaboom", spans[0].Status().Description)
}
