package ax

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// JobHandler runs jobs of one kind. Work is called on a worker goroutine
// with a context that is cancelled when the kind's timeout passes, when the
// job's lease is lost (context.Cause is ErrLeaseLost), when a user cancels
// the job (ErrJobCancelled) or when Stop runs out of time (ErrStopping).
//
// Work returns nil for success; an error to retry (with the kind's
// RetryPolicy, until MaxAttempts); an error wrapping ErrSkipRetry (see
// Permanent) to fail at once; or Snooze(d) to run again later without
// counting the attempt. A panic is recovered and recorded as a failed
// attempt with its stack.
//
// Delivery is at least once: after a crash or a lost lease a job can run
// again, so handlers should be idempotent (Job.ID is a natural key).
type JobHandler interface {
	Work(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to JobHandler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, job *Job) error { return f(ctx, job) }

// Middleware wraps a JobHandler, as net/http middleware wraps a Handler.
type Middleware func(JobHandler) JobHandler

// HandlerOption configures a kind at Handle: Timeout, Retry, Concurrency,
// Use, CompletesInTx, the cluster-wide flow options GlobalConcurrency,
// PartitionBy, RateLimit, CircuitBreaker and MaxPending, and the shared
// options Priority and MaxAttempts.
//
// They hold whoever schedules the kind's jobs: Timeout, Retry and Use
// apply to every attempt this host runs, and MaxAttempts and Priority are
// stored with the kind at Start (store.KindDefaulter) for the jobs that
// hosts without a handler for the kind schedule (see the MaxAttempts
// option).
type HandlerOption interface {
	applyHandler(*handlerSettings) error
}

// handlerSettings is a kind's configuration after options.
type handlerSettings struct {
	timeout     time.Duration
	maxAttempts int
	priority    PriorityLevel
	retry       RetryPolicy
	concurrency int
	middleware  []Middleware
	// flow holds the kind's cluster-wide flow settings (flow.go; Kind is
	// set at declaration), flowSet whether an option set any.
	flow    store.FlowConfig
	flowSet bool
	// storeChecks are what the kind needs of the Scheduler's store
	// (CompletesInTx), checked by Handle before it registers the kind.
	storeChecks []func(store.Store) error
}

type handlerOptionFunc func(*handlerSettings) error

func (f handlerOptionFunc) applyHandler(h *handlerSettings) error { return f(h) }

// Timeout bounds each attempt of the kind: the handler's context gets this
// deadline, and a handler that returns context.DeadlineExceeded fails the
// attempt (which is retried). Defaults to Config.JobTimeout. d <= 0 is an
// error wrapping ErrInvalidOption.
func Timeout(d time.Duration) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		if d <= 0 {
			return fmt.Errorf("%w: Timeout(%s) <= 0", ErrInvalidOption, d)
		}
		h.timeout = d
		return nil
	})
}

// Retry sets the kind's RetryPolicy. Defaults to Config.RetryPolicy. A nil
// policy is an error wrapping ErrInvalidOption.
func Retry(p RetryPolicy) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		if p == nil {
			return fmt.Errorf("%w: nil RetryPolicy", ErrInvalidOption)
		}
		h.retry = p
		return nil
	})
}

// Concurrency caps how many jobs of the kind run at once on this host
// (further jobs wait in the store). Defaults to Config.Workers, the host's
// total. n < 1 is an error wrapping ErrInvalidOption.
func Concurrency(n int) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		if n < 1 {
			return fmt.Errorf("%w: Concurrency(%d) < 1", ErrInvalidOption, n)
		}
		h.concurrency = n
		return nil
	})
}

// Use wraps the kind's handler in middleware; the first one given is the
// outermost. Config.Middleware wraps outside these.
func Use(mw ...Middleware) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		for _, m := range mw {
			if m == nil {
				return fmt.Errorf("%w: nil Middleware", ErrInvalidOption)
			}
		}
		h.middleware = append(h.middleware, mw...)
		return nil
	})
}

// CompletesInTx declares that the kind's handler ends its jobs with
// CompleteTxOf (or CompleteTx) in a transaction of type Tx: a pgx.Tx for
// pgstore, a *sql.Tx for sqlitestore. Registration (Scheduler.Handle,
// Handle, HandleArgs, HandleResult) then checks the Scheduler's store:
// when its CompleteTx takes no Tx (memstore takes none), it fails with an
// error wrapping ErrTxUnsupported that names the store and Tx types, and
// nothing is registered, rather than the first job failing after the
// handler's other effects (a charge made before CompleteTxOf).
//
//	err := ax.HandleArgs(s, charge, ax.CompletesInTx[pgx.Tx]())
//
// Every Tx given must be taken: a handler that picks its type by store
// declares the one of the store it is registered on. At run time a
// CompleteTxOf with a type the store does not take fails permanently,
// with or without this option.
func CompletesInTx[Tx any]() HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		h.storeChecks = append(h.storeChecks, func(st store.Store) error {
			_, err := txCompleterOf[Tx](st)
			return err
		})
		return nil
	})
}

// Handle registers a handler whose payload is decoded from JSON into a T
// before fn is called. A payload that does not decode fails the attempt
// permanently (no retry can fix it). When the payload was sealed
// (Config.Keys), that error names the type and the field, never a value
// of the payload, since the job's errors, logs and events are stored and
// shown in the clear. See Scheduler.Handle for the rest.
func Handle[T any](s *Scheduler, kind string, fn func(ctx context.Context, job *Job, payload T) error, opts ...HandlerOption) error {
	if fn == nil {
		return fmt.Errorf("handle %q: %w: nil handler func", kind, ErrInvalidOption)
	}
	return s.Handle(kind, HandlerFunc(func(ctx context.Context, job *Job) error {
		var payload T
		if err := decodePayload(job, &payload); err != nil { // decode.go
			return Permanent(err)
		}
		return fn(ctx, job, payload)
	}), opts...)
}

// kindHandler is a registered kind: its handler wrapped in middleware and
// its settings with defaults applied.
type kindHandler struct {
	kind     string
	handler  JobHandler
	settings handlerSettings
	// declared reports that its flow settings are stored (guarded by
	// Scheduler.mu).
	declared bool
}

func wrapMiddleware(h JobHandler, mw []Middleware) JobHandler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}
