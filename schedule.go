package ax

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// ScheduleResult is what Schedule did.
type ScheduleResult struct {
	// ID is the new job's ID or, when Duplicate, the ID of the job holding
	// the same UniqueKey.
	ID uuid.UUID
	// Duplicate reports that a job with the same UniqueKey existed, so
	// nothing was inserted. It is not an error.
	Duplicate bool
}

// Request is one job for ScheduleMany, ScheduleManyTx or a Batch.
// NewRequest makes one from a JobArgs, its kind and options included.
type Request struct {
	Kind    string
	Payload any
	Options []ScheduleOption
}

// Schedule stores a job of kind with payload (encoded as JSON; a
// json.RawMessage is stored as is) and returns once the store has it: from
// then on no crash loses it. With no timing option the job is due at once.
//
// Scheduling a kind that has no handler on this host is allowed, since
// another host may handle it; such a job waits until a host that handles
// the kind runs. Its MaxAttempts and Priority, unless set by options, are
// the kind's all the same: those its handlers stored at their Start
// (store.KindDefaulter, read in one store call per Schedule), or
// Config.MaxAttempts and Normal when no handler of the kind has started
// yet or the store keeps none. The kind's Timeout and RetryPolicy are
// always those of the host that runs the attempt.
//
// Errors (nothing is stored): ErrInvalidKind, ErrUnknownKind (with
// Config.RefuseUnknownKinds), ErrInvalidPayload, ErrInvalidOption,
// ErrSchedulerClosed, ErrBackpressure (a
// *BackpressureError: the kind has MaxPending jobs pending, or all kinds
// Config.MaxPending; see WaitForCapacity), or the store's error.
func (s *Scheduler) Schedule(ctx context.Context, kind string, payload any, opts ...ScheduleOption) (ScheduleResult, error) {
	res, err := s.ScheduleMany(ctx, []Request{{Kind: kind, Payload: payload, Options: opts}})
	if err != nil {
		return ScheduleResult{}, err
	}
	return res[0], nil
}

// ScheduleMany stores several jobs in one store call (COPY on PostgreSQL).
// Either all are stored (duplicates reported per job) or, on error, none.
// Results are in the order of reqs.
func (s *Scheduler) ScheduleMany(ctx context.Context, reqs []Request) ([]ScheduleResult, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	params, err := s.insertParams(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if s.closed() {
		return nil, fmt.Errorf("schedule: %w", ErrSchedulerClosed)
	}
	wait, cancel := waitContext(reqs)
	defer cancel()
	insert := s.store.Insert
	var direct *directStart
	if len(params) == 1 {
		direct = s.reserveDirect(ctx, &params[0]) // nil: no direct start (direct.go)
	}
	if direct != nil {
		insert = direct.insert
	}
	res, err := s.insertWaiting(ctx, wait, params, func(p []store.InsertParams) ([]store.InsertResult, error) {
		return insert(ctx, p)
	})
	if err != nil {
		if direct != nil {
			direct.settle()
		}
		return nil, fmt.Errorf("schedule %d job(s): %w", len(params), err)
	}
	out := s.scheduled(params, res)
	if direct == nil || !direct.settle() {
		s.wakeForInserted(params, res)
	}
	return out, nil
}

// wakeForInserted wakes this host's claimer for the earliest job it just
// inserted and can run itself: at once for an immediate job, through the
// wheel for a near one. It saves the notification's round trip through the
// store; other hosts still learn of the jobs from the notification.
func (s *Scheduler) wakeForInserted(params []store.InsertParams, res []store.InsertResult) {
	s.mu.Lock()
	run, handlers := s.run, s.handlers
	if run == nil || s.phase != phaseRunning {
		s.mu.Unlock()
		return
	}
	earliest, found := time.Time{}, false
	now := s.now()
	for i, p := range params {
		if res[i].Duplicate || handlers[p.Kind] == nil {
			continue
		}
		at := now.Add(p.Delay)
		if !p.RunAt.IsZero() {
			at = s.hostTime(p.RunAt)
		}
		if !found || at.Before(earliest) {
			earliest, found = at, true
		}
	}
	s.mu.Unlock()
	if found && earliest.Sub(now) <= lookahead {
		run.wakeAt(earliest)
	}
}

// ScheduleTx schedules a job inside the caller's PostgreSQL transaction, so
// the job exists only if tx commits, together with the business write it
// belongs to. Hosts are woken when tx commits. Stores that cannot do this
// (memstore) return ErrTxUnsupported. Other errors are as for Schedule.
//
// ScheduleTx emits no EventScheduled: the Scheduler cannot know whether tx
// commits, and an event must never count a job that was never stored. The
// job's first event is EventStarted, on the host that runs it. For other
// stores' transactions (sqlitestore's *sql.Tx), see ScheduleTxOf; for
// typed jobs, EnqueueTx.
func (s *Scheduler) ScheduleTx(ctx context.Context, tx pgx.Tx, kind string, payload any, opts ...ScheduleOption) (ScheduleResult, error) {
	return ScheduleTxOf(ctx, s, tx, kind, payload, opts...)
}

// ScheduleManyTx is ScheduleMany inside the caller's PostgreSQL
// transaction: the jobs exist only if tx commits, all of them (duplicates
// reported per job), together with the business writes they belong to.
// As for ScheduleTx, hosts are woken when tx commits and no EventScheduled
// is emitted; stores that cannot do this (memstore) return
// ErrTxUnsupported before anything is written, and other errors are
// ScheduleMany's. For other stores' transactions (sqlitestore's *sql.Tx),
// see ScheduleManyTxOf; for typed jobs, EnqueueManyTx.
func (s *Scheduler) ScheduleManyTx(ctx context.Context, tx pgx.Tx, reqs []Request) ([]ScheduleResult, error) {
	return ScheduleManyTxOf(ctx, s, tx, reqs)
}

// scheduleTx validates jobs and inserts them with insert, inside a
// caller's transaction. what names the call in errors.
func (s *Scheduler) scheduleTx(ctx context.Context, what string, reqs []Request,
	insert func([]store.InsertParams) ([]store.InsertResult, error)) ([]ScheduleResult, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	params, err := s.insertParams(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if s.closed() {
		return nil, fmt.Errorf("%s: %w", what, ErrSchedulerClosed)
	}
	wait, cancel := waitContext(reqs)
	defer cancel()
	res, err := s.insertWaiting(ctx, wait, params, insert)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(res) != len(params) {
		return nil, fmt.Errorf("%s: store %T returned %d results for %d jobs", what, s.store, len(res), len(params))
	}
	return s.report(params, res, false), nil
}

// scheduled logs stored jobs, emits their EventScheduled and converts
// store results.
func (s *Scheduler) scheduled(params []store.InsertParams, res []store.InsertResult) []ScheduleResult {
	return s.report(params, res, true)
}

// report logs inserted jobs (committed or, for ScheduleTx, inserted in a
// transaction) and converts store results; committed jobs also emit
// EventScheduled.
func (s *Scheduler) report(params []store.InsertParams, res []store.InsertResult, committed bool) []ScheduleResult {
	msg := "job scheduled"
	if !committed {
		msg = "job scheduled in a transaction (it exists once the transaction commits)"
	}
	out := make([]ScheduleResult, len(res))
	for i, r := range res {
		out[i] = ScheduleResult{ID: r.ID, Duplicate: r.Duplicate}
		p := &params[i]
		if committed && !r.Duplicate {
			s.emit(Event{Kind: EventScheduled, JobID: r.ID, JobKind: p.Kind, Metadata: p.Metadata})
		}
		if ce := s.log.Check(zap.DebugLevel, msg); ce != nil {
			when := zap.Float64(fieldDelayMS, ms(p.Delay)) // due Delay after the store's now
			if !p.RunAt.IsZero() {
				when = zap.Time("run_at", p.RunAt)
			}
			ce.Write(zap.Stringer(fieldJobID, r.ID), zap.String(fieldKind, p.Kind), traceField(p.Metadata),
				zap.Bool("duplicate", r.Duplicate), when, zap.Int("priority", p.Priority))
		}
	}
	return out
}

// insertParams validates requests and turns them into store rows.
func (s *Scheduler) insertParams(ctx context.Context, reqs []Request) ([]store.InsertParams, error) {
	var ctxMetadata map[string]string
	if s.cfg.MetadataFromContext != nil {
		ctxMetadata = s.cfg.MetadataFromContext(ctx)
		if err := store.CheckMetadata(ctxMetadata); err != nil {
			return nil, fmt.Errorf("schedule: %w: metadata from Config.MetadataFromContext: %w", ErrInvalidOption, err)
		}
	}
	params := make([]store.InsertParams, len(reqs))
	for i, r := range reqs {
		p, err := s.unresolvedParam(r, ctxMetadata)
		if err == nil {
			err = s.sealInsert(&p) // encryption.go
		}
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", r.Kind, err)
		}
		p.PendingLimit = s.cfg.MaxPending
		params[i] = p
	}
	if err := s.refuseUnknownKinds(ctx, params); err != nil { // unhandled.go
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if err := s.resolveKindDefaults(ctx, params); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	return params, nil
}

// insertParam validates one request and turns it into a store row, its
// kind's defaults resolved (kinddefaults.go).
func (s *Scheduler) insertParam(ctx context.Context, r Request, ctxMetadata map[string]string) (store.InsertParams, error) {
	p, err := s.unresolvedParam(r, ctxMetadata)
	if err == nil {
		err = s.sealInsert(&p) // encryption.go
	}
	if err != nil {
		return store.InsertParams{}, err
	}
	params := []store.InsertParams{p}
	if err := s.resolveKindDefaults(ctx, params); err != nil {
		return store.InsertParams{}, err
	}
	return params[0], nil
}

// unresolvedParam validates one request and turns it into a store row
// whose MaxAttempts and Priority are left zero when neither the request
// nor a handler on this host sets them: resolveKindDefaults fills them
// (one store read for many rows), and a row left zero is refused by the
// store, never stored with a guess.
func (s *Scheduler) unresolvedParam(r Request, ctxMetadata map[string]string) (store.InsertParams, error) {
	if err := checkKind(r.Kind); err != nil {
		return store.InsertParams{}, requestError(r, err) // args.go
	}
	var set scheduleSettings
	if len(ctxMetadata) > 0 {
		set.metadata = maps.Clone(ctxMetadata)
	}
	for _, o := range r.Options {
		if o == nil {
			return store.InsertParams{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.applySchedule(&set); err != nil {
			return store.InsertParams{}, err
		}
	}
	payload, err := encodePayload(r.Payload)
	if err != nil {
		return store.InsertParams{}, err
	}
	var priority PriorityLevel // zero: the kind's default, resolved later
	var maxAttempts int
	if h := s.handler(r.Kind); h != nil {
		priority, maxAttempts = h.settings.priority, h.settings.maxAttempts
	}
	if set.priority != 0 {
		priority = set.priority
	}
	if set.maxAttempts != 0 {
		maxAttempts = set.maxAttempts
	}
	followUps, err := s.followUps(set.followUps)
	if err != nil {
		return store.InsertParams{}, err
	}
	if set.uniqueSet && set.uniqueKey == "" {
		return store.InsertParams{}, fmt.Errorf("%w: UniqueGlobal, UniqueWhileFinished and UniqueFor need a UniqueKey", ErrInvalidOption)
	}
	if set.sequenceKey != "" {
		if _, err := flowStoreOf(s.store); err != nil {
			return store.InsertParams{}, fmt.Errorf("Sequential: %w", err)
		}
	}
	id, err := newJobID()
	if err != nil {
		return store.InsertParams{}, fmt.Errorf("new job id: %w", err)
	}
	return store.InsertParams{
		FollowUps:   followUps,
		ID:          id,
		Kind:        r.Kind,
		Payload:     payload,
		Metadata:    set.metadata,
		Priority:    int(priority),
		RunAt:       set.runAt,
		Delay:       set.delay,
		MaxAttempts: maxAttempts,
		UniqueKey:   set.uniqueKey,
		Unique:      set.unique,
		SequenceKey: set.sequenceKey,
	}, nil
}

// encodePayload returns payload as JSON within the store's size limit.
func encodePayload(payload any) ([]byte, error) {
	var b []byte
	if raw, ok := payload.(json.RawMessage); ok {
		// encoding/json accepts invalid UTF-8 in strings; no store can keep
		// it byte for byte.
		if !json.Valid(raw) || !utf8.Valid(raw) {
			return nil, fmt.Errorf("%w: json.RawMessage is not valid JSON in UTF-8", ErrInvalidPayload)
		}
		b = raw
	} else {
		var err error
		if b, err = json.Marshal(payload); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPayload, err)
		}
	}
	if len(b) > store.MaxPayloadSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, more than the %d allowed", ErrInvalidPayload, len(b), store.MaxPayloadSize)
	}
	return b, nil
}

// checkKind validates a job kind: 1 to store.MaxKindLength bytes of valid
// UTF-8 without NUL bytes.
func checkKind(kind string) error {
	if kind == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKind)
	}
	if err := store.CheckText(kind, store.MaxKindLength); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrInvalidKind, kind, err)
	}
	return nil
}
