package ax

import (
	"context"
	"fmt"
	"reflect"
)

// JobArgs is a payload type that names its own job kind, so that the kind
// and the type cannot drift apart: Enqueue schedules it without naming the
// kind, and HandleArgs registers its handler by the same name.
//
//	type EmailArgs struct{ To, Body string }
//
//	func (EmailArgs) Kind() string { return "email.send" }
//
//	ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, a EmailArgs) error { ... })
//	ax.Enqueue(ctx, s, EmailArgs{To: "ada@example.com"}, ax.In(time.Minute))
//
// Every call that takes a kind and a payload has a form that takes
// JobArgs instead: Enqueue and EnqueueMany (Schedule, ScheduleMany),
// EnqueueTx and EnqueueManyTx (ScheduleTxOf, ScheduleManyTxOf), NewRequest
// (a Request for ScheduleMany, ScheduleManyTx or a Batch), ThenArgs
// (Then), FollowUpArgs (FollowUp) and EveryArgs (Every). A type may also
// state its jobs' default options: see JobArgsWithOptions.
//
// Kind must return the same constant for every value of the type (it is
// called on the zero value by HandleArgs). A Kind that panics (a method
// of a nil pointer) makes these calls return an error wrapping
// ErrInvalidKind.
type JobArgs interface {
	Kind() string
}

// JobArgsWithOptions is a JobArgs that states the default options of its
// jobs (River's InsertOpts): how many attempts they get, their priority,
// their uniqueness, their metadata, follow-ups or sequence.
//
//	type ChargeArgs struct{ Order string }
//
//	func (ChargeArgs) Kind() string { return "order.charge" }
//
//	func (a ChargeArgs) ScheduleOptions() []ax.ScheduleOption {
//		return []ax.ScheduleOption{ax.MaxAttempts(5), ax.Priority(ax.High),
//			ax.UniqueKey("charge:" + a.Order), ax.UniqueWhileFinished()}
//	}
//
// ScheduleOptions is called on each value scheduled, once per job, so a
// value may derive its options from its fields (a unique key from an
// order number). The calls that take JobArgs apply them before the
// options given at the call: an option given at the call wins over the
// type's for what it sets (the later MaxAttempts, Priority, UniqueKey,
// UniqueFor, In or At decides), and options that add up (Metadata,
// FollowUp, the UniqueGlobal and UniqueWhileFinished scopes) add to the
// type's. The type's options in turn win over the kind's handler options
// (Handle's MaxAttempts and Priority) and Config.MaxAttempts. A Then or
// follow-up job keeps no unique key (ThenArgs, FollowUpArgs), and a
// periodic schedule sets its jobs' time and key itself (EveryArgs).
//
// They are a producer's defaults, applied where Go code schedules a
// value of the type: Schedule, Then and FollowUp with a kind string do
// not look for them, nor do the HTTP API and the CLI, which schedule by
// kind. A default every producer must get belongs on the handler, whose
// MaxAttempts and Priority are stored with the kind (see MaxAttempts).
//
// An invalid option makes the call fail as it would at the call, with an
// error wrapping ErrInvalidOption; a ScheduleOptions that panics (a
// method of a nil pointer) too.
type JobArgsWithOptions interface {
	JobArgs
	// ScheduleOptions returns the options of the job scheduled from this
	// value, applied before those given at the call.
	ScheduleOptions() []ScheduleOption
}

// Enqueue schedules a job of args.Kind() with args as its payload, the
// type's own options (JobArgsWithOptions) before opts; see
// Scheduler.Schedule for the options and errors.
func Enqueue[A JobArgs](ctx context.Context, s *Scheduler, args A, opts ...ScheduleOption) (ScheduleResult, error) {
	r, err := argsRequest(args, opts)
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("enqueue: %w", err)
	}
	return s.Schedule(ctx, r.Kind, r.Payload, r.Options...)
}

// EnqueueMany schedules several jobs in one store call, each of its
// value's kind, with its value's own options (JobArgsWithOptions) before
// opts; see Scheduler.ScheduleMany. A is one args type, or JobArgs itself
// for values of several types (a NewRequest each, in ScheduleMany, gives
// each job options of its own).
func EnqueueMany[A JobArgs](ctx context.Context, s *Scheduler, args []A, opts ...ScheduleOption) ([]ScheduleResult, error) {
	reqs, err := argsRequests(args, opts)
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	return s.ScheduleMany(ctx, reqs)
}

// EnqueueTx is Enqueue inside tx, a transaction of the Scheduler's store
// (a pgx.Tx for pgstore, a *sql.Tx of its file for sqlitestore): the job
// exists only if tx commits, together with the caller's writes in tx. See
// ScheduleTxOf for the rest: no EventScheduled, hosts woken when tx
// commits, ErrTxUnsupported (before anything is written) for a store that
// takes no transaction of tx's type, such as memstore.
//
// Tx is inferred from tx's static type, which must be the one the store's
// InsertTx takes: a pgx.Tx value, not a concrete type behind it (write
// EnqueueTx[pgx.Tx] for such a value).
func EnqueueTx[Tx any, A JobArgs](ctx context.Context, s *Scheduler, tx Tx, args A, opts ...ScheduleOption) (ScheduleResult, error) {
	r, err := argsRequest(args, opts)
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("enqueue in tx: %w", err)
	}
	return ScheduleTxOf(ctx, s, tx, r.Kind, r.Payload, r.Options...)
}

// EnqueueManyTx is EnqueueMany inside tx, a transaction of the
// Scheduler's store: all the jobs exist if tx commits, none if it rolls
// back. See ScheduleManyTxOf.
func EnqueueManyTx[Tx any, A JobArgs](ctx context.Context, s *Scheduler, tx Tx, args []A, opts ...ScheduleOption) ([]ScheduleResult, error) {
	reqs, err := argsRequests(args, opts)
	if err != nil {
		return nil, fmt.Errorf("enqueue in tx: %w", err)
	}
	return ScheduleManyTxOf(ctx, s, tx, reqs)
}

// NewRequest returns the Request of a job of args.Kind() with args as its
// payload and the type's own options (JobArgsWithOptions) before opts:
// one entry of ScheduleMany or ScheduleManyTx, a Batch's child or its
// completion, typed, and of as many types as needed in one call.
//
//	ax.Batch{
//		Children:   []ax.Request{ax.NewRequest(ResizeArgs{Image: 1}), ax.NewRequest(ResizeArgs{Image: 2})},
//		Completion: ax.NewRequest(AlbumReadyArgs{Album: 7}),
//	}
//
// An args whose Kind or ScheduleOptions panics makes the call that
// schedules the request fail with an error wrapping ErrInvalidKind or
// ErrInvalidOption.
func NewRequest[A JobArgs](args A, opts ...ScheduleOption) Request {
	r, err := argsRequest(args, opts)
	if err != nil {
		return Request{Kind: r.Kind, Options: []ScheduleOption{argsErrOption{err}}}
	}
	return r
}

// ThenArgs is Then with a job of args.Kind() with args as its payload, the
// type's own options (JobArgsWithOptions) before opts: from a handler, a
// follow-up inserted only if the attempt succeeds, atomically with the
// success (or with CompleteTx's transaction). As for every Then job, a
// unique key among the options (the type's UniqueKey included) is not
// kept: the job is inserted once by its parent's success, with no key.
// Errors are Then's.
func ThenArgs[A JobArgs](ctx context.Context, args A, opts ...ScheduleOption) error {
	r, err := argsRequest(args, opts)
	if err != nil {
		return fmt.Errorf("then: %w", err)
	}
	return Then(ctx, r.Kind, r.Payload, r.Options...)
}

// FollowUpArgs is FollowUp with a job of args.Kind() with args as its
// payload, the type's own options (JobArgsWithOptions) before opts: a
// Schedule option that makes the store insert that job when the job
// scheduled reaches one of the final states on. As for every follow-up,
// a unique key among the options (the type's UniqueKey included) is not
// kept: the job is inserted once per end of its parent, with no key.
// Errors are FollowUp's, returned by the call that schedules the job.
func FollowUpArgs[A JobArgs](on []State, args A, opts ...ScheduleOption) ScheduleOption {
	return followUpOption{on: on, req: NewRequest(args, opts...)}
}

// HandleArgs registers fn for the jobs of A's kind (A's zero value's
// Kind()), decoding each payload into an A as Handle does. A whose zero
// value cannot tell its kind (a nil pointer type) is an error wrapping
// ErrInvalidKind.
func HandleArgs[A JobArgs](s *Scheduler, fn func(ctx context.Context, job *Job, args A) error, opts ...HandlerOption) error {
	kind, err := argsKind[A]()
	if err != nil {
		return fmt.Errorf("handle args: %w", err)
	}
	return Handle(s, kind, fn, opts...)
}

// argsKind returns A's kind from its zero value, recovering from a Kind
// method that needs a non-nil receiver.
func argsKind[A JobArgs]() (kind string, err error) {
	defer func() {
		if recover() != nil {
			var a A
			err = fmt.Errorf("%w: %s.Kind() panics on the zero value; give it a value receiver", ErrInvalidKind, reflect.TypeOf(&a).Elem())
		}
	}()
	var a A
	return a.Kind(), nil
}

// argsRequest returns the request of a job of args: its kind, args as its
// payload, and its type's own options before opts, so that opts win. On
// error, the request has the kind when it was read.
func argsRequest(args JobArgs, opts []ScheduleOption) (Request, error) {
	kind, err := kindOf(args)
	if err != nil {
		return Request{}, err
	}
	own, err := ownOptions(args)
	if err != nil {
		return Request{Kind: kind}, err
	}
	if len(own) > 0 {
		// A new slice: neither the type's nor the caller's is written to.
		opts = append(append(make([]ScheduleOption, 0, len(own)+len(opts)), own...), opts...)
	}
	return Request{Kind: kind, Payload: args, Options: opts}, nil
}

// argsRequests is argsRequest for each of args.
func argsRequests[A JobArgs](args []A, opts []ScheduleOption) ([]Request, error) {
	reqs := make([]Request, len(args))
	for i, a := range args {
		r, err := argsRequest(a, opts)
		if err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i, len(args), err)
		}
		reqs[i] = r
	}
	return reqs, nil
}

// kindOf returns args.Kind(), or an error wrapping ErrInvalidKind for a
// nil args or a Kind that panics.
func kindOf(args JobArgs) (kind string, err error) {
	if args == nil {
		return "", fmt.Errorf("%w: nil JobArgs", ErrInvalidKind)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %T.Kind() panics: %v", ErrInvalidKind, args, p)
		}
	}()
	return args.Kind(), nil
}

// ownOptions returns the options args states for its jobs
// (JobArgsWithOptions), or an error wrapping ErrInvalidOption for a
// ScheduleOptions that panics.
func ownOptions(args JobArgs) (opts []ScheduleOption, err error) {
	wo, ok := args.(JobArgsWithOptions)
	if !ok {
		return nil, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %T.ScheduleOptions() panics: %v", ErrInvalidOption, args, p)
		}
	}()
	return wo.ScheduleOptions(), nil
}

// argsErrOption carries the error of a NewRequest whose args could not be
// read: the request's scheduling fails with it.
type argsErrOption struct{ err error }

func (o argsErrOption) applySchedule(*scheduleSettings) error { return o.err }

// requestError returns the error of a request whose kind is invalid: its
// NewRequest's when it has one (the kind could not be read), else err.
func requestError(r Request, err error) error {
	for _, o := range r.Options {
		if a, ok := o.(argsErrOption); ok {
			return a.err
		}
	}
	return err
}
