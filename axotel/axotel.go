// Package axotel traces AX jobs with OpenTelemetry: the trace context of
// the code that schedules a job travels in the job's metadata (W3C
// traceparent and tracestate) through the store, and each attempt of the
// job runs in a span that is a child of the scheduling span, on whichever
// host runs it.
//
//	s, err := ax.New(ax.Config{
//		Store:               st,
//		MetadataFromContext: axotel.MetadataFromContext,
//		Middleware:          []ax.Middleware{axotel.Middleware(tracerProvider)},
//	})
//
// The Scheduler's logs then carry the trace ID (field trace_id) of every
// attempt. Only this package imports OpenTelemetry; the core does not
// depend on it.
package axotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/axsched/ax"
)

// ScopeName is the instrumentation scope of the spans axotel starts.
const ScopeName = "github.com/axsched/ax/axotel"

// Span attribute keys set on every attempt's span.
const (
	AttrKind    = attribute.Key("ax.job.kind")
	AttrID      = attribute.Key("ax.job.id")
	AttrAttempt = attribute.Key("ax.job.attempt")
	// AttrOutcome is what the attempt came to, as the handler's result
	// shows it: "succeeded", "retry" (failed, attempts left), "dead"
	// (failed for good), "snoozed", "cancelled" (by a user), "lease_lost",
	// "stopping" (cut short by Stop and handed back) or "panic".
	AttrOutcome = attribute.Key("ax.job.outcome")
)

// propagator is the W3C Trace Context format, used whatever the global
// propagator is, since the core reads the trace ID for its logs from the
// traceparent entry.
var propagator = propagation.TraceContext{}

// MetadataFromContext returns the W3C trace context of the span in ctx as
// job metadata: "traceparent" and, when set, "tracestate". It returns nil
// when ctx has no valid span context. Use it as
// ax.Config.MetadataFromContext, so every Schedule call records its trace.
func MetadataFromContext(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	md := propagation.MapCarrier{}
	propagator.Inject(ctx, md)
	return md
}

// ContextWithJob returns ctx carrying, as its remote parent span context,
// the trace context stored in job's metadata by MetadataFromContext. ctx
// is returned as is when the job has none. Middleware calls it; use it
// directly to start spans of your own.
func ContextWithJob(ctx context.Context, job *ax.Job) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(job.Metadata))
}

// Middleware returns an ax.Middleware running each attempt in a span named
// "ax.job <kind>" (kind consumer) from tp, a child of the span that
// scheduled the job when its metadata carries one (see
// MetadataFromContext), else the root of a new trace. The span has the
// attributes AttrKind, AttrID, AttrAttempt and AttrOutcome; a failed
// attempt records its error and sets the span's status to Error. A nil tp
// means the global otel.GetTracerProvider().
func Middleware(tp trace.TracerProvider) ax.Middleware {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer(ScopeName)
	return func(next ax.JobHandler) ax.JobHandler {
		return ax.HandlerFunc(func(ctx context.Context, job *ax.Job) (err error) {
			ctx, span := tracer.Start(ContextWithJob(ctx, job), "ax.job "+job.Kind,
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					AttrKind.String(job.Kind),
					AttrID.String(job.ID.String()),
					AttrAttempt.Int(job.Attempt),
				))
			panicked := true
			defer func() {
				if !panicked {
					return
				}
				v := recover()
				if v == nil { // runtime.Goexit: nothing to re-raise
					span.End()
					return
				}
				span.SetAttributes(AttrOutcome.String("panic"))
				span.SetStatus(codes.Error, fmt.Sprintf("panic: %v", v))
				span.End()
				panic(v) // re-raised for the Scheduler, which records it
			}()
			err = next.Work(ctx, job)
			panicked = false
			outcome := outcomeOf(ctx, job, err)
			span.SetAttributes(AttrOutcome.String(outcome))
			if err != nil && outcome != "snoozed" && outcome != "cancelled" && outcome != "stopping" {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
			return err
		})
	}
}

// outcomeOf names what an attempt's result does to the job, as the
// Scheduler decides it (see JobHandler).
func outcomeOf(ctx context.Context, job *ax.Job, err error) string {
	var snooze *ax.SnoozeError
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		return "succeeded"
	case errors.Is(cause, ax.ErrJobCancelled):
		return "cancelled"
	case errors.Is(cause, ax.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(cause, ax.ErrStopping):
		return "stopping"
	case errors.As(err, &snooze):
		return "snoozed"
	case errors.Is(err, ax.ErrSkipRetry), job.Attempt >= job.MaxAttempts:
		return "dead"
	default:
		return "retry"
	}
}
