package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/axsched/ax/store"
)

// Results and follow-ups recorded by a running handler: what it produced
// (RecordResult, HandleResult) and the jobs that follow its success (Then).
// Both are written with the attempt's outcome, in the same atomic store
// operation, so a crash can neither lose nor double them.

// ErrInvalidResult is the error of an attempt whose result cannot be
// stored: not encodable as JSON, or larger than store.MaxResultSize. The
// attempt fails (and is retried like any failure); the host carries on.
var ErrInvalidResult = errors.New("ax: invalid job result")

// ErrNotInHandler is returned by RecordResult, Then and CompleteTx when
// their context is not a handler's.
var ErrNotInHandler = errors.New("ax: not called from a job handler")

// attemptKey is the context key of the running attempt's extras.
type attemptKey struct{}

// attemptExtras is what a handler recorded during its attempt.
type attemptExtras struct {
	s *Scheduler
	a *attempt

	mu          sync.Mutex
	result      json.RawMessage
	resultErr   error
	then        []store.InsertParams
	completedTx bool // CompleteTx committed (or was to commit) the outcome
}

// txCompleted reports whether CompleteTx ended the attempt in the
// handler's transaction.
func (x *attemptExtras) txCompleted() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.completedTx
}

// extrasFrom returns the running attempt's extras, or nil outside a
// handler.
func extrasFrom(ctx context.Context) *attemptExtras {
	if ctx == nil {
		return nil
	}
	x, _ := ctx.Value(attemptKey{}).(*attemptExtras)
	return x
}

// followUpStore returns the store's FollowUpStore, or an error wrapping
// errors.ErrUnsupported.
func (s *Scheduler) followUpStore() (store.FollowUpStore, error) {
	fs, ok := s.store.(store.FollowUpStore)
	if !ok {
		return nil, fmt.Errorf("store %T keeps no results or follow-ups: %w", s.store, errors.ErrUnsupported)
	}
	return fs, nil
}

// RecordResult records v, encoded as JSON, as the running job's result.
// It is written with the attempt's outcome (whatever the outcome: a
// failed attempt can leave a partial result) and returned by Get; the
// last call of an attempt wins. It returns ErrNotInHandler outside a
// handler, an error wrapping errors.ErrUnsupported when the store keeps no
// results, and ErrInvalidResult for a value that is not encodable or is
// larger than store.MaxResultSize (the attempt then fails).
func RecordResult(ctx context.Context, v any) error {
	x := extrasFrom(ctx)
	if x == nil {
		return fmt.Errorf("record result: %w", ErrNotInHandler)
	}
	if _, err := x.s.followUpStore(); err != nil {
		return fmt.Errorf("record result: %w", err)
	}
	b, err := encodeResult(v)
	if err == nil {
		b, err = x.s.sealResult(x.a.job.ID, b) // encryption.go
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err != nil {
		x.resultErr = err
		return err
	}
	x.result, x.resultErr = b, nil
	return nil
}

// encodeResult returns v as storable result JSON.
func encodeResult(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidResult, err)
	}
	if len(b) > store.MaxResultSize {
		return nil, fmt.Errorf("%w: %d bytes of JSON, more than %d", ErrInvalidResult, len(b), store.MaxResultSize)
	}
	return b, nil
}

// HandleResult registers a typed handler that returns a result: the
// payload is decoded into a T (as Handle does), and the R it returns with
// a nil error is stored as the job's result (see RecordResult; an R that
// cannot be stored fails the attempt with ErrInvalidResult).
func HandleResult[T, R any](s *Scheduler, kind string, fn func(ctx context.Context, job *Job, payload T) (R, error), opts ...HandlerOption) error {
	if fn == nil {
		return fmt.Errorf("handle %q: %w: nil handler func", kind, ErrInvalidOption)
	}
	if _, err := s.followUpStore(); err != nil {
		return fmt.Errorf("handle %q: %w", kind, err)
	}
	return Handle(s, kind, func(ctx context.Context, job *Job, payload T) error {
		r, err := fn(ctx, job, payload)
		if err != nil {
			return err
		}
		return RecordResult(ctx, r)
	}, opts...)
}

// Then schedules a follow-up job from a handler: it is inserted only if the
// attempt succeeds, atomically with the success (or with CompleteTx's
// transaction), so a crash can neither lose it nor insert it twice. The
// options are Schedule's, but for a UniqueKey, which is not kept: the job
// is inserted once, by its parent's success. It returns ErrNotInHandler
// outside a handler, the errors Schedule returns for bad input, and an
// error wrapping errors.ErrUnsupported when the store cannot insert
// follow-ups. ThenArgs takes a JobArgs instead of a kind and payload.
//
// Then makes no store call, since the handler may hold its pool's
// connection in an open transaction: the kind's stored defaults, and
// with Config.RefuseUnknownKinds a kind that this host's copy of the
// cluster's kinds cannot answer for without reading the registry again,
// are read with the outcome, in one call for all the attempt's Then jobs:
// on CompleteTx's transaction (whose error then wraps ErrUnknownKind), or
// before a plain success is written (the attempt then fails with that
// error and is retried).
func Then(ctx context.Context, kind string, payload any, opts ...ScheduleOption) error {
	x := extrasFrom(ctx)
	if x == nil {
		return fmt.Errorf("then %q: %w", kind, ErrNotInHandler)
	}
	if _, err := x.s.followUpStore(); err != nil {
		return fmt.Errorf("then %q: %w", kind, err)
	}
	p, err := x.s.unresolvedParam(Request{Kind: kind, Payload: payload, Options: opts}, nil)
	if err == nil {
		err = x.s.sealInsert(&p) // encryption.go
	}
	if err == nil {
		// No store call: the handler may hold its pool's connection in the
		// transaction it passes to CompleteTx. What needs one is checked
		// with the outcome (resolveThen).
		err = x.s.refuseListedUnknownKinds([]store.InsertParams{p}) // unhandled.go
	}
	if err != nil {
		return fmt.Errorf("then %q: %w", kind, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.then = append(x.then, p)
	return nil
}

// resolveThen returns then, the Then jobs of an attempt about to succeed,
// with what Then left for the outcome: the kinds refused with
// Config.RefuseUnknownKinds and the defaults stored for them
// (kinddefaults.go), read with ctx, which carries CompleteTx's
// transaction when there is one. then itself is not changed.
func (s *Scheduler) resolveThen(ctx context.Context, then []store.InsertParams) ([]store.InsertParams, error) {
	if len(then) == 0 {
		return then, nil
	}
	out := make([]store.InsertParams, len(then))
	for i, p := range then {
		p.FollowUps = slices.Clone(p.FollowUps)
		out[i] = p
	}
	if err := s.refuseUnknownKinds(ctx, out); err != nil { // unhandled.go
		return nil, fmt.Errorf("then: %w", err)
	}
	if err := s.resolveKindDefaults(ctx, out); err != nil {
		return nil, fmt.Errorf("then: %w", err)
	}
	return out, nil
}

// FollowUp is a Schedule option: when the job reaches one of the final
// states on (StateSucceeded, StateDead, StateCancelled), the store inserts
// a job of kind with payload and opts, in the same atomic operation —
// whatever ends the job: its handler, a rescue after its attempts ran out,
// a cancel. A job retried by hand after it ended inserts its follow-ups
// again when it ends again. A UniqueKey among opts is not kept. An invalid follow-up is an error wrapping
// ErrInvalidOption (or ErrInvalidKind, ErrInvalidPayload) from Schedule;
// stores that cannot keep follow-ups make Schedule return an error wrapping
// errors.ErrUnsupported. FollowUpArgs takes a JobArgs instead of a kind
// and payload.
func FollowUp(on []State, kind string, payload any, opts ...ScheduleOption) ScheduleOption {
	return followUpOption{on: on, req: Request{Kind: kind, Payload: payload, Options: opts}}
}

type followUpOption struct {
	on  []State
	req Request
}

func (o followUpOption) applySchedule(s *scheduleSettings) error {
	s.followUps = append(s.followUps, o)
	return nil
}

// followUps builds the store form of a job's FollowUp options.
func (s *Scheduler) followUps(opts []followUpOption) ([]store.FollowUp, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	if _, err := s.followUpStore(); err != nil {
		return nil, err
	}
	out := make([]store.FollowUp, len(opts))
	for i, o := range opts {
		if len(o.on) == 0 {
			return nil, fmt.Errorf("%w: FollowUp with no final state", ErrInvalidOption)
		}
		for _, st := range o.on {
			if !st.Final() {
				return nil, fmt.Errorf("%w: FollowUp on %q, which is not a final state", ErrInvalidOption, st)
			}
		}
		p, err := s.unresolvedParam(o.req, nil) // resolved with the job that carries it
		if err != nil {
			return nil, fmt.Errorf("follow-up %q: %w", o.req.Kind, err)
		}
		if len(p.FollowUps) > 0 {
			return nil, fmt.Errorf("%w: a follow-up cannot have follow-ups of its own", ErrInvalidOption)
		}
		out[i] = store.FollowUp{On: append([]State(nil), o.on...), Job: p}
	}
	return out, nil
}
