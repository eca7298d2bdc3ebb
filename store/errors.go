package store

import "errors"

// Errors a Store returns. Implementations wrap them with context
// (fmt.Errorf("cancel job %s: %w", id, ErrNotFound)); callers match them with
// errors.Is.
var (
	// ErrNotFound means no job has the given ID (it never existed or was
	// pruned).
	ErrNotFound = errors.New("ax/store: job not found")

	// ErrWrongState means the job exists but the requested transition is not
	// allowed from its current state (for example pausing a succeeded job).
	// Nothing was changed.
	ErrWrongState = errors.New("ax/store: transition not allowed from the job's state")

	// ErrInvalidParams means the parameters of a call were rejected before
	// anything was written (empty kind, priority out of range, negative
	// limit, oversize payload...). Nothing was changed.
	ErrInvalidParams = errors.New("ax/store: invalid parameters")

	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("ax/store: store closed")
)
