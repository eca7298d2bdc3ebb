package ax

import (
	"errors"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// Errors returned by the Scheduler. Match them with errors.Is; they are
// wrapped with context ("schedule email.send: ax: invalid option: ...").
var (
	// ErrSchedulerClosed is returned by every call made after Stop began.
	ErrSchedulerClosed = errors.New("ax: scheduler closed")

	// ErrInvalidConfig is returned by New for a Config it cannot use (a
	// missing Store, negative or too small durations, a Node name that is
	// not storable text, out-of-range counts).
	ErrInvalidConfig = errors.New("ax: invalid config")

	// ErrInvalidKind is returned for a job kind that is empty, longer than
	// store.MaxKindLength bytes, not valid UTF-8 or holds a NUL byte.
	ErrInvalidKind = errors.New("ax: invalid job kind")

	// ErrInvalidOption is returned for an option with a value out of range
	// (negative delay, a time outside the years 1 to 9999, unknown
	// priority, max attempts or concurrency out of range, non-positive
	// timeout, a unique key or metadata that is not storable text or too
	// long), and for a nil context.
	ErrInvalidOption = errors.New("ax: invalid option")

	// ErrInvalidPayload is returned when a payload cannot be encoded as
	// JSON, is not valid UTF-8 (a json.RawMessage) or is larger than
	// store.MaxPayloadSize.
	ErrInvalidPayload = errors.New("ax: invalid payload")

	// ErrDuplicateHandler is returned by Handle for a kind that already has
	// a handler in this Scheduler.
	ErrDuplicateHandler = errors.New("ax: handler already registered for kind")

	// ErrTxUnsupported is returned by ScheduleTx, ScheduleManyTx,
	// CompleteTx, ScheduleBatchTx, their Of forms, EnqueueTx and
	// EnqueueManyTx when the Store takes no transaction of the type
	// given: pgstore takes a pgx.Tx, sqlitestore a *sql.Tx of its file,
	// memstore none. CompleteTx's and CompleteTxOf's are permanent (see
	// Permanent). Handle returns it for a handler declared with
	// CompletesInTx in a type the Store's CompleteTx does not take.
	ErrTxUnsupported = errors.New("ax: store takes no transaction of this type")

	// ErrNotFound is returned for a job ID the store does not know.
	ErrNotFound = store.ErrNotFound

	// ErrWrongState is returned when a job's state does not allow the
	// requested operation (pausing a finished job, for example).
	ErrWrongState = store.ErrWrongState

	// ErrSkipRetry, wrapped in a handler's error, makes the failure
	// permanent: the job goes to dead at once, whatever attempts remain.
	// Permanent(err) is a shorthand.
	ErrSkipRetry = errors.New("ax: permanent failure, no retry")

	// ErrLeaseLost is the cause (context.Cause) of a handler's context
	// cancellation when this host lost the job's lease: another host may
	// already run it, and this attempt's result will be discarded.
	ErrLeaseLost = errors.New("ax: job lease lost")

	// ErrJobCancelled is the cause of a handler's context cancellation when
	// a user cancelled the running job.
	ErrJobCancelled = errors.New("ax: job cancelled")

	// ErrStopping is the cause of a handler's context cancellation when Stop
	// ran out of time; the job is handed back to the store for another host.
	ErrStopping = errors.New("ax: scheduler stopping")

	// ErrOutcomesNotWritten is returned by Stop (joined with ctx.Err()
	// when its deadline passed) when attempt outcomes could not be
	// written: the store was unreachable until Stop's deadline plus
	// Config.ReleaseTimeout, or refused a row. Nothing is lost: those jobs
	// are still running in the store, and are rescued and run again once
	// their leases expire.
	ErrOutcomesNotWritten = errors.New("ax: attempt outcomes not written")
)

// Permanent marks err as a permanent failure: the job goes to dead without
// further attempts. errors.Is(Permanent(err), ErrSkipRetry) and
// errors.Is(Permanent(err), err) both hold. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// permanentError is what Permanent returns: err, marked with ErrSkipRetry.
type permanentError struct{ err error }

// Error prefixes the wrapped error with "permanent: ".
func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }

// Unwrap exposes both the wrapped error and ErrSkipRetry to errors.Is.
func (e *permanentError) Unwrap() []error { return []error{e.err, ErrSkipRetry} }

// Snooze, returned by a handler, puts the job back to scheduled to run again
// after d, without counting the attempt. A negative d is treated as 0.
func Snooze(d time.Duration) error {
	return &SnoozeError{Delay: max(d, 0)}
}

// SnoozeError is the error Snooze returns; errors.As finds it in a chain.
type SnoozeError struct {
	// Delay is how long the job sleeps before its next run.
	Delay time.Duration
}

// Error implements error.
func (e *SnoozeError) Error() string { return fmt.Sprintf("ax: snooze %s", e.Delay) }

// PanicError is the error recorded when a handler panics.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error; it includes the stack so the job's recorded
// error shows where the panic happened.
func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n%s", e.Value, e.Stack)
}
