package ax

import "go.uber.org/zap"

// Log field names, fixed so operators can query them across services.
const (
	fieldJobID      = "job_id"
	fieldKind       = "kind"
	fieldAttempt    = "attempt"
	fieldNode       = "node"
	fieldLagMS      = "lag_ms"
	fieldDurationMS = "duration_ms"
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
	if tp := j.Metadata[traceparentKey]; len(tp) >= 35 && tp[2] == '-' {
		f = append(f, zap.String(fieldTraceID, tp[3:35]))
	}
	return f
}
