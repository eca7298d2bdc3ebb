package ax

// Log field names, fixed so operators can query them across services.
const (
	fieldJobID      = "job_id"
	fieldKind       = "kind"
	fieldAttempt    = "attempt"
	fieldNode       = "node"
	fieldLagMS      = "lag_ms"
	fieldDurationMS = "duration_ms"
	fieldError      = "error"
)
