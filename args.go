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
// Kind must return the same constant for every value of the type (it is
// called on the zero value by HandleArgs).
type JobArgs interface {
	Kind() string
}

// Enqueue schedules a job of args.Kind() with args as its payload; see
// Scheduler.Schedule for the options and errors.
func Enqueue[A JobArgs](ctx context.Context, s *Scheduler, args A, opts ...ScheduleOption) (ScheduleResult, error) {
	return s.Schedule(ctx, args.Kind(), args, opts...)
}

// EnqueueMany schedules several jobs of one args type in one store call;
// see Scheduler.ScheduleMany.
func EnqueueMany[A JobArgs](ctx context.Context, s *Scheduler, args []A, opts ...ScheduleOption) ([]ScheduleResult, error) {
	reqs := make([]Request, len(args))
	for i, a := range args {
		reqs[i] = Request{Kind: a.Kind(), Payload: a, Options: opts}
	}
	return s.ScheduleMany(ctx, reqs)
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
