package ax

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Job is what a handler sees of the job it runs. It is a snapshot taken at
// claim time; handlers must not keep it beyond their return.
type Job struct {
	// ID is the job's UUIDv7.
	ID uuid.UUID
	// Kind selects the handler.
	Kind string
	// Payload is the job's JSON payload as scheduled.
	Payload json.RawMessage
	// Metadata carries the string metadata given at Schedule (trace
	// context among others). Never nil. Read-only: observers may be
	// reading it concurrently.
	Metadata map[string]string
	// Priority the job was scheduled with.
	Priority PriorityLevel
	// Attempt is this attempt's number, starting at 1.
	Attempt int
	// MaxAttempts is the attempt after which a failure is final.
	MaxAttempts int
	// RunAt is when this attempt became due (store clock): the scheduled
	// time for a first attempt, later the time a retry, snooze or RunNow
	// set.
	RunAt time.Time
	// ScheduledAt is the time the job was originally scheduled for (store
	// clock). Unlike RunAt it stays fixed across retries, snoozes and
	// RunNow.
	ScheduledAt time.Time
	// Tick is, for a job of a periodic schedule (see Scheduler.Every), the
	// schedule's tick the job was made for; zero for other jobs. It is
	// also the job's ScheduledAt.
	Tick time.Time
	// Schedule names the periodic schedule that made the job; empty for
	// other jobs. Triggered tells a manual run from a tick's job.
	Schedule string
	// FencingToken grows with every attempt of the job (every claim), and
	// never decreases, even across snoozes, which give Attempt back. Pass it to downstream systems that can refuse a write
	// carrying a token lower than one they already saw: a late write of an
	// attempt whose lease was lost is then refused there too.
	FencingToken int64
	// Batch is the batch the job is a child of, or completes (see
	// Scheduler.ScheduleBatch); zero otherwise.
	Batch uuid.UUID
	// Parent is the job whose end inserted this one (a FollowUp, a Then,
	// or a batch's last child); zero otherwise.
	Parent uuid.UUID
	// StartedAt is when this attempt was claimed (store clock), or its
	// RunAt for a job claimed a few milliseconds ahead of it, which the
	// host holds until then (see ClaimLag); StartedAt minus RunAt is the
	// claim lag and is never negative.
	StartedAt time.Time
	// CreatedAt is when the job was scheduled (store clock).
	CreatedAt time.Time
	// UniqueKey is the job's idempotency key, if any.
	UniqueKey string
	// Errors are the earlier attempts' errors, oldest first.
	Errors []store.AttemptError
	// PartitionKey is the job's partition under its kind's PartitionBy
	// (derived when it was scheduled); empty otherwise.
	PartitionKey string
	// SequenceKey is the job's Sequential key, if any.
	SequenceKey string

	// sealed reports that the job's values were opened from sealed ones
	// (Config.Keys): Handle's decode errors then withhold the values
	// (decode.go).
	sealed bool
}

// ClaimLag is how late the attempt was claimed: StartedAt minus RunAt,
// both in the store's clock. Zero for a job claimed ahead of its RunAt:
// claims take jobs due within a few claim round trips (8× the smoothed
// claim time, 5–50 ms) and the host starts each at its RunAt, never
// earlier by the store's clock. The handler's own start lag, measured on
// the host's clock at the handler's start, is EventStarted's StartLag.
func (j *Job) ClaimLag() time.Duration { return j.StartedAt.Sub(j.RunAt) }

func jobFromRecord(r *store.JobRecord) *Job {
	md := r.Metadata
	if md == nil {
		md = map[string]string{}
	}
	schedule, tick := parsePeriodicKey(r.UniqueKey)
	if schedule != "" && tick.IsZero() {
		tick = r.ScheduledAt // a manual run's: the trigger's instant
	}
	return &Job{
		ID:           r.ID,
		Kind:         r.Kind,
		Payload:      json.RawMessage(r.Payload),
		Metadata:     md,
		Priority:     PriorityLevel(r.Priority),
		Attempt:      r.Attempt,
		MaxAttempts:  r.MaxAttempts,
		RunAt:        r.RunAt,
		ScheduledAt:  r.ScheduledAt,
		Tick:         tick,
		Schedule:     schedule,
		FencingToken: r.Fence,
		Batch:        r.Batch,
		Parent:       r.Parent,
		StartedAt:    r.AttemptedAt,
		CreatedAt:    r.CreatedAt,
		UniqueKey:    r.UniqueKey,
		Errors:       r.Errors,
		PartitionKey: r.PartitionKey,
		SequenceKey:  r.SequenceKey,
	}
}

// PriorityLevel orders due jobs: every due High job is claimed before any
// Normal one, and Normal before Low.
type PriorityLevel int

// The three priority levels. The zero value means "the kind's default",
// which is Normal unless the handler was registered with a Priority option.
const (
	High   PriorityLevel = store.PriorityHigh
	Normal PriorityLevel = store.PriorityNormal
	Low    PriorityLevel = store.PriorityLow
)

// String returns "high", "normal" or "low".
func (p PriorityLevel) String() string {
	switch p {
	case High:
		return "high"
	case Normal:
		return "normal"
	case Low:
		return "low"
	}
	return fmt.Sprintf("PriorityLevel(%d)", int(p))
}

func (p PriorityLevel) valid() bool { return p >= High && p <= Low }

// ScheduleOption configures one Schedule call: In, At, Priority, UniqueKey,
// MaxAttempts, Metadata, Sequential, WaitForCapacity. With no timing
// option a job is due at once.
type ScheduleOption interface {
	applySchedule(*scheduleSettings) error
}

// scheduleSettings collects the options of one Schedule call.
type scheduleSettings struct {
	delay       time.Duration
	runAt       time.Time
	priority    PriorityLevel
	uniqueKey   string
	maxAttempts int
	metadata    map[string]string
	followUps   []followUpOption
	unique      store.UniqueScope
	uniqueSet   bool // a scope option was given
	sequenceKey string
}

type scheduleOptionFunc func(*scheduleSettings) error

func (f scheduleOptionFunc) applySchedule(s *scheduleSettings) error { return f(s) }

// In makes the job due d after the store's current time (not the host's).
// A negative d is an error wrapping ErrInvalidOption. Every duration fits:
// the longest, about 292 years, stays within the years the stores keep.
func In(d time.Duration) ScheduleOption {
	return scheduleOptionFunc(func(s *scheduleSettings) error {
		if d < 0 {
			return fmt.Errorf("%w: negative delay In(%s)", ErrInvalidOption, d)
		}
		s.delay, s.runAt = d, time.Time{}
		return nil
	})
}

// At makes the job due at t (compared with the store's clock). A time in the
// past means due at once. A zero t, or one outside the years 1 to 9999
// (store.MinTime to store.MaxTime), is an error wrapping ErrInvalidOption.
func At(t time.Time) ScheduleOption {
	return scheduleOptionFunc(func(s *scheduleSettings) error {
		if t.IsZero() {
			return fmt.Errorf("%w: At(zero time)", ErrInvalidOption)
		}
		if err := store.CheckTime(t); err != nil {
			return fmt.Errorf("%w: At: %w", ErrInvalidOption, err)
		}
		s.runAt, s.delay = t, 0
		return nil
	})
}

// UniqueKey makes Schedule idempotent: while another job holds key,
// scheduling a job with the same key inserts nothing and returns the
// holder's ID with Duplicate set. By default a key is held by a job of the
// same kind while it is scheduled, retrying, paused or running (a finished
// job frees it); UniqueGlobal, UniqueWhileFinished and UniqueFor widen
// that. A cancelled job never holds its key. The check is an index in the
// store, safe across hosts. RunNow of a dead or cancelled job that gave its
// key up on ending returns ErrWrongState, changing nothing, when another
// job holds the key meanwhile (RetryJobs leaves such a job alone). The key
// must be valid UTF-8 without NUL bytes, 1 to store.MaxUniqueKeyLength
// bytes, and must not start with "periodic:", the prefix of periodic
// jobs' keys; otherwise it is an error wrapping ErrInvalidOption.
func UniqueKey(key string) ScheduleOption {
	return scheduleOptionFunc(func(s *scheduleSettings) error {
		switch {
		case key == "":
			return fmt.Errorf("%w: empty UniqueKey", ErrInvalidOption)
		case strings.HasPrefix(key, periodicKeyPrefix):
			return fmt.Errorf("%w: UniqueKey prefix %q is reserved for periodic jobs", ErrInvalidOption, periodicKeyPrefix)
		}
		if err := store.CheckText(key, store.MaxUniqueKeyLength); err != nil {
			return fmt.Errorf("%w: UniqueKey: %w", ErrInvalidOption, err)
		}
		s.uniqueKey = key
		return nil
	})
}

// UniqueGlobal makes the job's UniqueKey unique across all kinds; by
// default a key is unique only among jobs of the same kind. Given without
// UniqueKey it is an error wrapping ErrInvalidOption.
func UniqueGlobal() ScheduleOption {
	return scheduleOptionFunc(func(s *scheduleSettings) error {
		s.unique.Global, s.uniqueSet = true, true
		return nil
	})
}

// UniqueWhileFinished keeps the job's UniqueKey held after the job ends
// succeeded or dead, until it is pruned (Config.Retention), for keys that
// must never run twice (a payment reference). By default a key is held
// only while its job is scheduled, retrying, paused or running, so a
// finished job frees it. Given without UniqueKey it is an error wrapping
// ErrInvalidOption.
func UniqueWhileFinished() ScheduleOption {
	return scheduleOptionFunc(func(s *scheduleSettings) error {
		s.unique.Finished, s.uniqueSet = true, true
		return nil
	})
}

// UniqueFor makes the job's UniqueKey hold for windows of d: at most one
// job per key per window, whatever their states (but cancelled), the
// windows aligned to the Unix epoch in the store's clock — UniqueFor(24 *
// time.Hour) allows one per UTC day. d must be whole seconds, from 1s to
// store.MaxUniquePeriod; otherwise, or without UniqueKey, it is an error
// wrapping ErrInvalidOption.
func UniqueFor(d time.Duration) ScheduleOption {
	return scheduleOptionFunc(func(s *scheduleSettings) error {
		if d < time.Second || d > store.MaxUniquePeriod || d%time.Second != 0 {
			return fmt.Errorf("%w: UniqueFor(%s): want whole seconds from 1s to %s", ErrInvalidOption, d, store.MaxUniquePeriod)
		}
		s.unique.Period, s.uniqueSet = d, true
		return nil
	})
}

// uniqueKeyOption sets a key made by AX itself (periodic jobs), which may
// use the reserved prefix.
type uniqueKeyOption string

func (o uniqueKeyOption) applySchedule(s *scheduleSettings) error {
	s.uniqueKey = string(o)
	return nil
}

// Metadata attaches string metadata to the job (Schedule) or to every job
// of a periodic schedule (Every), merged over metadata given by earlier
// options. The handler sees it in Job.Metadata. Keys must be non-empty;
// keys and values must be valid UTF-8 without NUL bytes, and together at
// most store.MaxMetadataSize bytes; otherwise it is an error wrapping
// ErrInvalidOption.
func Metadata(md map[string]string) JobOption { return metadataOption(maps.Clone(md)) }

type metadataOption map[string]string

func (o metadataOption) applySchedule(s *scheduleSettings) error {
	if err := store.CheckMetadata(o); err != nil {
		return fmt.Errorf("%w: Metadata: %w", ErrInvalidOption, err)
	}
	if s.metadata == nil {
		s.metadata = make(map[string]string, len(o))
	}
	maps.Copy(s.metadata, o)
	return nil
}

func (o metadataOption) applyPeriodic(s *periodicSettings) error {
	if err := store.CheckMetadata(o); err != nil {
		return fmt.Errorf("%w: Metadata: %w", ErrInvalidOption, err)
	}
	if err := checkTickMetadata(o); err != nil {
		return fmt.Errorf("%w: Metadata: %w", ErrInvalidOption, err)
	}
	s.jobOpts = append(s.jobOpts, o)
	return nil
}

// checkTickMetadata refuses, in a schedule's metadata, the key that marks
// a manual run (MetadataTrigger): each tick's job would carry it, and
// Job.Triggered would take the ticks for manual runs.
func checkTickMetadata(md map[string]string) error {
	if _, ok := md[MetadataTrigger]; ok {
		return fmt.Errorf("key %q is reserved for manual runs of a schedule (Admin.TriggerSchedule)", MetadataTrigger)
	}
	return nil
}

// JobOption is accepted by Schedule (for one job) and by Every (for each
// job of the schedule): Metadata.
type JobOption interface {
	ScheduleOption
	PeriodicOption
}

// Option is accepted by Schedule (for one job), by Every (for each job of
// the schedule) and by Handle (as the kind's default): Priority and
// MaxAttempts.
type Option interface {
	ScheduleOption
	PeriodicOption
	HandlerOption
}

// Priority sets the job's priority (Schedule) or the kind's default
// priority (Handle). Without it, a job gets its kind's default: the
// handler's on this host, or the one the kind's handlers stored
// (store.KindDefaulter) when this host does not handle the kind, else
// Normal. A value other than High, Normal or Low is an error wrapping
// ErrInvalidOption.
func Priority(p PriorityLevel) Option { return priorityOption(p) }

type priorityOption PriorityLevel

func (o priorityOption) check() error {
	if !PriorityLevel(o).valid() {
		return fmt.Errorf("%w: priority %d is not High, Normal or Low", ErrInvalidOption, int(o))
	}
	return nil
}

func (o priorityOption) applySchedule(s *scheduleSettings) error {
	s.priority = PriorityLevel(o)
	return o.check()
}

func (o priorityOption) applyHandler(h *handlerSettings) error {
	h.priority = PriorityLevel(o)
	return o.check()
}

func (o priorityOption) applyPeriodic(s *periodicSettings) error {
	s.jobOpts = append(s.jobOpts, o)
	return o.check()
}

// MaxAttempts sets how many attempts a job gets before a failure is final:
// for one job (Schedule) or as the kind's default (Handle). A job without
// it gets its kind's default whoever schedules it: the handler's on this
// host, or, when this host does not handle the kind (ax serve, the HTTP
// API, a producer-only service), the one the kind's handlers stored at
// their Start (store.KindDefaulter; the last to start wins); else
// Config.MaxAttempts. The job keeps the value it got: a later change of
// the kind's option applies to jobs scheduled afterwards. n outside [1,
// store.MaxAttemptsLimit] is an error wrapping ErrInvalidOption.
func MaxAttempts(n int) Option { return maxAttemptsOption(n) }

type maxAttemptsOption int

func (o maxAttemptsOption) check() error {
	if o < 1 || o > store.MaxAttemptsLimit {
		return fmt.Errorf("%w: MaxAttempts(%d) not in [1, %d]", ErrInvalidOption, int(o), store.MaxAttemptsLimit)
	}
	return nil
}

func (o maxAttemptsOption) applySchedule(s *scheduleSettings) error {
	s.maxAttempts = int(o)
	return o.check()
}

func (o maxAttemptsOption) applyHandler(h *handlerSettings) error {
	h.maxAttempts = int(o)
	return o.check()
}

func (o maxAttemptsOption) applyPeriodic(s *periodicSettings) error {
	s.jobOpts = append(s.jobOpts, o)
	return o.check()
}
