package ax

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Log field names, fixed so operators can query them across services.
// Every duration is a number of milliseconds, in a field ending in _ms.
const (
	fieldJobID      = "job_id"
	fieldKind       = "kind"
	fieldAttempt    = "attempt"
	fieldNode       = "node"
	fieldLagMS      = "lag_ms"       // handler start (host clock) minus run_at
	fieldClaimLagMS = "claim_lag_ms" // claim minus run_at, both in the store's clock
	fieldDurationMS = "duration_ms"
	fieldRetryInMS  = "retry_in_ms"
	fieldDelayMS    = "delay_ms"
	fieldError      = "error"
	fieldTraceID    = "trace_id"
)

// traceparentKey is the job metadata key holding a W3C trace context, as
// written by axotel: "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>".
const traceparentKey = "traceparent"

// jobFields returns the log fields naming a job attempt, with the trace ID
// when the job carries a trace context.
func jobFields(j *Job) []zap.Field {
	f := make([]zap.Field, 0, 6)
	f = append(f, zap.Stringer(fieldJobID, j.ID), zap.String(fieldKind, j.Kind), zap.Int(fieldAttempt, j.Attempt))
	if tf := traceField(j.Metadata); tf.Type != zapcore.SkipType {
		f = append(f, tf)
	}
	return f
}

// traceField returns the trace_id field of a job's metadata, or zap.Skip()
// when it carries no W3C trace context.
func traceField(md map[string]string) zap.Field {
	if tp := md[traceparentKey]; len(tp) >= 35 && tp[2] == '-' {
		return zap.String(fieldTraceID, tp[3:35])
	}
	return zap.Skip()
}
