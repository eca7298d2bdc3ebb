package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// Schedule is a periodic schedule as the store keeps it (see
// Scheduler.Every), for operators.
type Schedule struct {
	// Name identifies the schedule.
	Name string `json:"name"`
	// Spec is the spec as the latest declaring host recorded it: with a
	// "CRON_TZ=<zone> " prefix when it was declared with Location.
	Spec string `json:"spec"`
	// TimeZone is the zone Spec is read in ("UTC" unless the spec or a
	// Location says otherwise); empty when this version cannot parse
	// Spec.
	TimeZone string `json:"time_zone,omitempty"`
	// Kind is the kind of the schedule's jobs, from the stored template;
	// empty when no template was recorded (declared by an older AX).
	Kind string `json:"kind,omitempty"`
	// LastTick is the latest tick fired, skipped or passed while paused
	// (store clock); zero (null in JSON) until the schedule's first tick.
	// (The store keeps the first declaration's time until then, as the
	// guard against earlier ticks, off whole seconds where ticks fall:
	// store.Ticked. A schedule an older AX declared on a whole second, one
	// in a million, shows that time.)
	LastTick time.Time `json:"last_tick"`
	// NextTick is the schedule's next tick after LastTick and the store's
	// now, computed from Spec: when it fires, if a host declaring it runs
	// then (and it is not paused). Zero when Spec cannot be parsed or
	// never fires again.
	NextTick time.Time `json:"next_tick,omitzero"`
	// Paused reports that an operator paused the schedule: its ticks pass
	// without jobs until it is resumed.
	Paused bool `json:"paused"`
	// UpdatedAt is when the schedule's state last changed (store clock).
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Job is the template of the schedule's jobs (kind, payload,
	// metadata, priority, max attempts) as the latest declaring host
	// recorded it; nil when none was recorded.
	Job *store.InsertParams `json:"job,omitempty"`
}

// MarshalJSON encodes s as its fields' tags say, with "last_tick": null
// until the schedule's first tick.
func (s Schedule) MarshalJSON() ([]byte, error) {
	type plain Schedule // without this method
	var last *time.Time
	if !s.LastTick.IsZero() {
		last = &s.LastTick
	}
	return json.Marshal(struct {
		plain
		LastTick *time.Time `json:"last_tick"`
	}{plain(s), last})
}

// Schedules lists the periodic schedules the store keeps, by name: every
// schedule a host ever declared, whether or not a running host declares
// it now. Errors: errors.ErrUnsupported (the store does not implement
// store.PeriodicController), or the store's error, wrapped.
func (a *Admin) Schedules(ctx context.Context) ([]Schedule, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	pc, ok := a.store.(store.PeriodicController)
	if !ok {
		return nil, unsupported("list schedules", a.store, "store.PeriodicController")
	}
	states, err := pc.ListPeriodic(ctx)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	now, err := a.store.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("list schedules: read store clock: %w", err)
	}
	out := make([]Schedule, len(states))
	for i := range states {
		out[i] = scheduleOf(&states[i], now)
	}
	return out, nil
}

// scheduleOf converts a stored state, with the next tick after the later
// of its last tick and now.
func scheduleOf(st *store.PeriodicState, now time.Time) Schedule {
	sc := Schedule{
		Name: st.Name, Spec: st.Spec, Paused: st.Paused,
		UpdatedAt: st.UpdatedAt, Job: st.Job,
	}
	if store.Ticked(st.LastTick) {
		sc.LastTick = st.LastTick
	}
	if st.Job != nil {
		sc.Kind = st.Job.Kind
	}
	// The stored spec carries its zone as a prefix when it has one, so it
	// reads the same here as on the hosts that declared it.
	if c, err := parseCron(st.Spec, time.UTC, false); err == nil {
		sc.TimeZone = c.loc.String()
		from := st.LastTick
		if now.After(from) {
			from = now
		}
		sc.NextTick = c.next(from)
	}
	return sc
}

// PauseSchedule pauses the periodic schedule name across the cluster: its
// ticks pass without jobs (each is recorded as fired, so nothing catches
// up on resume) until ResumeSchedule. Jobs it made earlier are left
// alone. Pausing a paused schedule changes nothing. It returns the
// schedule afterwards.
//
// Errors: ErrScheduleNotFound, errors.ErrUnsupported (the store does not
// implement store.PeriodicController), or the store's error, wrapped.
func (a *Admin) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	return a.setSchedulePaused(ctx, name, true)
}

// ResumeSchedule resumes a paused periodic schedule: its next tick fires
// a job again; the ticks that passed while it was paused do not.
// Resuming a schedule that is not paused changes nothing. Errors are as
// for PauseSchedule.
func (a *Admin) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	return a.setSchedulePaused(ctx, name, false)
}

func (a *Admin) setSchedulePaused(ctx context.Context, name string, paused bool) (*Schedule, error) {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("%s schedule: %w", verb, err)
	}
	if err := checkScheduleName(name); err != nil {
		return nil, fmt.Errorf("%s schedule: %w", verb, err)
	}
	pc, ok := a.store.(store.PeriodicController)
	if !ok {
		return nil, unsupported(verb+" schedule", a.store, "store.PeriodicController")
	}
	st, err := pc.SetPeriodicPaused(ctx, name, paused)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%s schedule %q: %w", verb, name, ErrScheduleNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s schedule %q: %w", verb, name, err)
	}
	a.audit("periodic schedule "+verb+"d", zap.String("schedule", name))
	now, err := a.store.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s schedule %q: read store clock: %w", verb, name, err)
	}
	sc := scheduleOf(st, now)
	return &sc, nil
}

// Metadata of a periodic schedule's run an operator asked for
// (Admin.TriggerSchedule, ax periodic trigger, the dashboard's "Run
// now"): MetadataTrigger is set to TriggerManual. A tick's job has no
// MetadataTrigger key. Job.Triggered reads it.
const (
	// MetadataTrigger is the metadata key that marks a manual run.
	MetadataTrigger = "ax.trigger"
	// TriggerManual is MetadataTrigger's value on a manual run.
	TriggerManual = "manual"
)

// Triggered reports whether j is a run of its periodic schedule that an
// operator asked for (Admin.TriggerSchedule), rather than a tick's:
// j.Schedule names the schedule and j.Metadata[MetadataTrigger] is
// TriggerManual.
func (j *Job) Triggered() bool {
	return j.Schedule != "" && j.Metadata[MetadataTrigger] == TriggerManual
}

// TriggerOption configures one Admin.TriggerSchedule call.
type TriggerOption interface {
	applyTrigger(*triggerSettings)
}

type triggerSettings struct {
	force bool
}

type triggerOptionFunc func(*triggerSettings)

func (f triggerOptionFunc) applyTrigger(s *triggerSettings) { f(s) }

// ForceTrigger makes TriggerSchedule insert a run even while the
// schedule's previous manual run is live (ax periodic trigger --force).
func ForceTrigger() TriggerOption {
	return triggerOptionFunc(func(s *triggerSettings) { s.force = true })
}

// manualKeySuffix ends the unique key of a schedule's manual run:
// "periodic:<name>:manual". A tick's key ends with a time, never with
// it.
const manualKeySuffix = ":manual"

// TriggerSchedule runs the periodic schedule name once, now, outside its
// ticks: it inserts one job from the schedule's stored template (kind,
// payload, metadata, priority, max attempts), due at once, with metadata
// MetadataTrigger = TriggerManual. The job's handler sees the schedule's
// name in Job.Schedule, the trigger's instant (store clock) in Job.Tick
// and Job.Triggered true. The schedule's ticks are unaffected, and so is
// the stored last tick. A paused schedule can be triggered.
//
// One manual run at a time: the run holds the unique key
// "periodic:<name>:manual" while it is live (scheduled, retrying, paused
// or running), so a trigger meanwhile inserts nothing and returns that
// run's ID with Duplicate set, whoever asks, on any host (the store
// enforces the key atomically). Once the run has ended (succeeded, dead
// or cancelled) the next trigger runs again. ForceTrigger inserts a run
// anyway, under the key "periodic:<name>:<instant>" of its own when the
// manual key is held. It returns the job's ID.
//
// Errors: ErrScheduleNotFound, ErrInvalidSchedule (no template stored:
// the schedule was declared only by an older AX), ErrInvalidOption (a
// nil option), errors.ErrUnsupported (the store does not implement
// store.PeriodicStore), or the store's error, wrapped.
func (a *Admin) TriggerSchedule(ctx context.Context, name string, opts ...TriggerOption) (ScheduleResult, error) {
	if err := checkContext(ctx); err != nil {
		return ScheduleResult{}, fmt.Errorf("trigger schedule: %w", err)
	}
	if err := checkScheduleName(name); err != nil {
		return ScheduleResult{}, fmt.Errorf("trigger schedule: %w", err)
	}
	var set triggerSettings
	for _, o := range opts {
		if o == nil {
			return ScheduleResult{}, fmt.Errorf("trigger schedule %q: %w: nil TriggerOption", name, ErrInvalidOption)
		}
		o.applyTrigger(&set)
	}
	ps, ok := a.store.(store.PeriodicStore)
	if !ok {
		return ScheduleResult{}, unsupported("trigger schedule", a.store, "store.PeriodicStore")
	}
	st, err := ps.PeriodicState(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return ScheduleResult{}, fmt.Errorf("trigger schedule %q: %w", name, ErrScheduleNotFound)
	}
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("trigger schedule %q: %w", name, err)
	}
	if st.Job == nil {
		return ScheduleResult{}, fmt.Errorf("trigger schedule %q: %w: no job template stored (declared by an older AX; a host of this version records one when it declares the schedule)", name, ErrInvalidSchedule)
	}
	now, err := a.store.Now(ctx)
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("trigger schedule %q: read store clock: %w", name, err)
	}
	id, err := newJobID()
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("trigger schedule %q: new job id: %w", name, err)
	}
	job := *st.Job
	job.Metadata = maps.Clone(job.Metadata)
	if job.Metadata == nil {
		job.Metadata = map[string]string{}
	}
	job.Metadata[MetadataTrigger] = TriggerManual
	job.ID, job.RunAt, job.Delay = id, now, 0
	job.UniqueKey, job.Unique = periodicKeyPrefix+name+manualKeySuffix, store.UniqueScope{}
	params := []store.InsertParams{job}
	res, err := a.store.Insert(ctx, params)
	if err == nil && res[0].Duplicate && set.force {
		// The previous manual run is live: this one gets a key of its
		// own (the ID was not used).
		params[0].UniqueKey = periodicKey(name, now)
		res, err = a.store.Insert(ctx, params)
	}
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("trigger schedule %q: %w", name, err)
	}
	if res[0].Duplicate {
		a.audit("periodic schedule trigger skipped: its previous manual run is live", zap.String("schedule", name), zap.Stringer(fieldJobID, res[0].ID))
	} else {
		a.audit("periodic schedule triggered", zap.String("schedule", name), zap.Stringer(fieldJobID, res[0].ID), zap.Bool("forced", set.force))
	}
	if a.sched != nil {
		a.sched.wakeForInserted(params, res)
		return a.sched.scheduled(params, res)[0], nil
	}
	return ScheduleResult{ID: res[0].ID, Duplicate: res[0].Duplicate}, nil
}

// checkScheduleName refuses a name no schedule can have.
func checkScheduleName(name string) error {
	if name == "" || store.CheckText(name, store.MaxKindLength) != nil {
		return fmt.Errorf("%w: name must be 1 to %d bytes of valid UTF-8 without NUL bytes", ErrInvalidSchedule, store.MaxKindLength)
	}
	return nil
}
