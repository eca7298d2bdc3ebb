// # Periodic jobs
//
// Every declares a periodic schedule on a Scheduler; while the Scheduler
// runs, it inserts one job of the schedule's kind per tick. There is no
// leader: every host that declares a schedule tries to fire each tick, and
// the store decides, in one atomic operation per attempt
// (store.PeriodicStore.FirePeriodic), which attempt wins:
//
//	host A ─┐                          ┌─ tick after last_tick, not after store now:
//	host B ─┼─ FirePeriodic(name, T) ──┤    last_tick = T and T's job inserted, together
//	host C ─┘                          └─ otherwise: nothing (another host fired T, or T is not due)
//
// The schedule's stored last tick, not the tick's job, is the guard, so a
// tick fires once even on a host that wakes after the tick's job finished
// and was pruned; the job's unique key "periodic:<name>:<tick>" is a second
// guard while the job exists. Ticks are computed and compared in the
// store's clock, so a host whose clock is off neither fires early (the
// store refuses a tick after its now) nor twice.
//
// One goroutine per Scheduler wakes at the next tick of its schedules (and
// at least every Config.PollInterval, reading the store's clock when no
// store call did for that long) and makes one store call per due schedule.
//
// State kept per schedule (store.PeriodicState): the spec last declared,
// the template of its jobs, the last tick fired, and whether an operator
// paused it (Admin.PauseSchedule: ticks pass without jobs). A new schedule
// starts at its first declaration (by Start, or by the loop for a
// schedule given to Every later): ticks before it never fire. After
// downtime (no host declaring the schedule was running at some ticks), the
// next host to start applies the schedule's MisfirePolicy to the ticks
// missed since the stored last tick, so restarts lose no run of even a
// weekly schedule.
//
// A Scheduler that is not started has no loop: RunDue (package axtest's
// Work) runs one round inline, on the caller's goroutine, so that tests
// fire ticks on a clock they move instead of waiting for timers.
package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Errors of periodic schedules.
var (
	// ErrInvalidSchedule is returned by Every for a bad schedule: an empty
	// or overlong name, a spec robfig/cron cannot parse (unknown time zone
	// included), a spec that never fires, a time zone given both by prefix
	// and by Location, or a second declaration of a name (which also
	// wraps ErrDuplicateSchedule).
	ErrInvalidSchedule = errors.New("ax: invalid periodic schedule")

	// ErrDuplicateSchedule is returned, with ErrInvalidSchedule, by Every
	// for a schedule name already declared on this Scheduler, whether with
	// the same spec or another.
	ErrDuplicateSchedule = errors.New("ax: periodic schedule already declared")

	// ErrPeriodicUnsupported is returned by Every when the Store does not
	// implement store.PeriodicStore (memstore and pgstore do).
	ErrPeriodicUnsupported = errors.New("ax: store does not support periodic schedules")
)

// MisfireGrace is how late a tick may be found and still count as on time
// for MisfireSkip.
const MisfireGrace = time.Minute

// MisfirePolicy says what a schedule does with ticks missed while no host
// declaring it ran, found when a host comes back. The zero value is
// MisfireRunOnce.
type MisfirePolicy struct {
	mode  misfireMode
	bound int
}

type misfireMode int

const (
	misfireRunOnce misfireMode = iota
	misfireSkip
	misfireRunAll
)

var (
	// MisfireRunOnce, the default, runs one job for all the ticks missed:
	// the job of the latest missed tick, as late as it is.
	MisfireRunOnce = MisfirePolicy{}

	// MisfireSkip runs no job for missed ticks: only a tick found within
	// MisfireGrace of its time runs; older ones are passed over (and
	// recorded as fired, without a job).
	MisfireSkip = MisfirePolicy{mode: misfireSkip}
)

// MisfireRunAll runs one job per missed tick, for the latest bound of them
// (older ones are passed over). bound must be from 1 to
// store.MaxPeriodicTicks; Misfire returns an error wrapping
// ErrInvalidOption otherwise.
func MisfireRunAll(bound int) MisfirePolicy {
	return MisfirePolicy{mode: misfireRunAll, bound: bound}
}

// String returns "run-once", "skip" or "run-all(<bound>)".
func (p MisfirePolicy) String() string {
	switch p.mode {
	case misfireSkip:
		return "skip"
	case misfireRunAll:
		return fmt.Sprintf("run-all(%d)", p.bound)
	}
	return "run-once"
}

// PeriodicOption configures Every: Location, Misfire and JobKind, plus the
// job options that make sense for every job of a schedule (Priority,
// MaxAttempts, Metadata). The compiler refuses the rest: In, At and
// UniqueKey are not PeriodicOptions, since the schedule sets each job's run
// time and key, and Location, Misfire and JobKind are not ScheduleOptions.
type PeriodicOption interface {
	applyPeriodic(*periodicSettings) error
}

// periodicOption is an option only Every understands.
type periodicOption func(*periodicSettings) error

func (o periodicOption) applyPeriodic(s *periodicSettings) error { return o(s) }

// periodicSettings collects Every's options.
type periodicSettings struct {
	loc     *time.Location
	locSet  bool
	kind    string
	misfire MisfirePolicy
	jobOpts []ScheduleOption // applied to each tick's job
}

// Location sets the time zone in which a schedule's spec is read, for
// specs without a CRON_TZ= or TZ= prefix (both at once is an error wrapping
// ErrInvalidSchedule). Defaults to UTC, whatever the host's zone. A nil
// loc is an error wrapping ErrInvalidOption.
func Location(loc *time.Location) PeriodicOption {
	return periodicOption(func(s *periodicSettings) error {
		if loc == nil {
			return fmt.Errorf("%w: nil Location", ErrInvalidOption)
		}
		s.loc, s.locSet = loc, true
		return nil
	})
}

// Misfire sets the schedule's MisfirePolicy. Defaults to MisfireRunOnce. A
// MisfireRunAll bound out of range is an error wrapping ErrInvalidOption.
func Misfire(p MisfirePolicy) PeriodicOption {
	return periodicOption(func(s *periodicSettings) error {
		if p.mode == misfireRunAll && (p.bound < 1 || p.bound > store.MaxPeriodicTicks) {
			return fmt.Errorf("%w: MisfireRunAll(%d) bound not in [1, %d]", ErrInvalidOption, p.bound, store.MaxPeriodicTicks)
		}
		s.misfire = p
		return nil
	})
}

// JobKind makes the schedule's jobs of kind instead of the schedule's
// name.
func JobKind(kind string) PeriodicOption {
	return periodicOption(func(s *periodicSettings) error {
		s.kind = kind
		return nil
	})
}

// schedule is one declared periodic schedule.
type schedule struct {
	name    string
	kind    string
	stored  string // the spec recorded in the store: the spec and its zone
	cron    *cronSchedule
	payload json.RawMessage
	opts    []ScheduleOption
	misfire MisfirePolicy
	// since is when Every declared the schedule on this Scheduler (its
	// clock): where a schedule the store does not know starts when RunDue
	// fires it (see firePeriodicDue).
	since time.Time

	// Guarded by periodicSet.fireMu.
	declared bool
	last     time.Time // the stored last tick, as last seen
}

// periodicSet holds a Scheduler's schedules and its periodic loop.
type periodicSet struct {
	mu        sync.Mutex
	schedules map[string]*schedule
	changed   chan struct{} // capacity 1: a schedule was added
	cancel    context.CancelFunc
	done      chan struct{}

	// fireMu is held by whoever declares schedules and fires ticks: Start
	// (declarePeriodic), then the periodic loop (a round at a time), or,
	// on a Scheduler not started, RunDue (firePeriodicDue). It guards the
	// schedules' declared and last fields and storeRead.
	fireMu    sync.Mutex
	storeRead time.Time // host time of the latest store clock reading
}

// initLocked makes the zero periodicSet usable; p.mu is held.
func (p *periodicSet) initLocked() {
	if p.schedules == nil {
		p.schedules = make(map[string]*schedule)
		p.changed = make(chan struct{}, 1)
	}
}

// snapshot returns the schedules sorted by name.
func (p *periodicSet) snapshot() []*schedule {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*schedule, 0, len(p.schedules))
	for _, sc := range p.schedules {
		out = append(out, sc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Every declares the periodic schedule name: while this Scheduler runs
// (from Start, or from the call if already started, until Stop), it inserts
// a job of kind name (or JobKind's) with payload (encoded once, now) at
// each tick of spec. A host needs no handler for the kind to declare the
// schedule; hosts with a handler run the jobs. Declare the same schedules
// on every host of a service: the hosts that declare a schedule are the
// ones that fire it, and a schedule removed from the code stops firing
// once no running host declares it (its state stays in the store, so the
// schedule resumes from its last tick if declared again). EveryArgs
// declares one from a JobArgs value, its kind and options taken from the
// type.
//
// Spec is parsed by robfig/cron/v3: five fields (minute hour day-of-month
// month day-of-week), or six with a leading seconds field; descriptors
// (@yearly, @monthly, @weekly, @daily, @hourly, @every <duration>); an
// optional CRON_TZ=<zone> or TZ=<zone> prefix. @every intervals are whole
// seconds, at least one, and aligned to the Unix epoch (@every 1h fires on
// the hour, UTC), so every host computes the same ticks.
//
// Exactly one job results per tick, whatever the number of hosts, their
// clock skew or leadership: every declaring host tries each tick, and the
// store applies a tick only if it is after the schedule's stored last tick
// and not after the store's clock, inserting its job in the same atomic
// operation. The job is due at the tick and has unique key
// "periodic:<name>:<tick in UTC, RFC 3339>". Its handler finds the
// schedule's name in Job.Schedule and the tick in Job.Tick (and
// Job.ScheduledAt), which stay fixed across retries; Job.RunAt is the tick
// only for the first attempt.
//
// A new schedule's first tick is the first after its first declaration in
// the store: Start declares the schedules given to Every before it, and
// returns once they are in the store; the periodic loop declares those
// given later. On a Scheduler that is not started, RunDue fires the due
// ticks inline (a schedule the store does not know yet counts from the
// Every call), so a test on a clock it moves sees each tick's job without
// waiting (package axtest).
//
// After downtime, missed ticks follow the Misfire policy (default
// MisfireRunOnce: one job, for the latest missed tick). A changed spec (or
// zone) takes effect at its next tick after the stored last tick, so no
// tick fires twice; the change is logged.
//
// Time zones and DST. Specs are read in UTC unless a prefix or Location
// says otherwise. Ticks are instants (identified in UTC). Specs matching
// every hour (hour field "*", @hourly, @every) tick whenever the wall clock
// matches: no tick in an hour a spring-forward skips, and ticks on both
// occurrences of an hour a fall-back repeats (they are an hour apart).
// Specs at fixed hours (daily, weekly...) fire each matching local time
// once per day: a time repeated by a fall-back fires at its first
// occurrence only (01:30 EDT, not 01:30 EST, in America/New_York); a time
// skipped by a spring-forward fires when the gap ends (a 02:30 job runs at
// 03:00 EDT on that day).
//
// Errors, nothing declared: ErrInvalidSchedule (bad name or spec, unknown
// zone, a spec that never fires; ErrDuplicateSchedule too for a name
// already declared on this Scheduler, same spec or not), ErrInvalidKind,
// ErrInvalidPayload, ErrInvalidOption (a nil option, one out of range,
// or metadata with the key MetadataTrigger, which marks manual runs),
// ErrPeriodicUnsupported, ErrSchedulerClosed.
func (s *Scheduler) Every(name, spec string, payload any, opts ...PeriodicOption) error {
	sc, err := s.newSchedule(name, spec, payload, opts)
	if err != nil {
		return fmt.Errorf("every %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase >= phaseStopping {
		return fmt.Errorf("every %q: %w", name, ErrSchedulerClosed)
	}
	p := &s.periodic
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	if old := p.schedules[name]; old != nil {
		return fmt.Errorf("every %q: %w: %w (spec %q)", name, ErrInvalidSchedule, ErrDuplicateSchedule, old.stored)
	}
	p.schedules[name] = sc
	select {
	case p.changed <- struct{}{}:
	default:
	}
	return nil
}

// newSchedule validates Every's arguments.
func (s *Scheduler) newSchedule(name, spec string, payload any, opts []PeriodicOption) (*schedule, error) {
	if name == "" || store.CheckText(name, store.MaxKindLength) != nil {
		return nil, fmt.Errorf("%w: name must be 1 to %d bytes of valid UTF-8 without NUL bytes", ErrInvalidSchedule, store.MaxKindLength)
	}
	set := periodicSettings{loc: time.UTC, kind: name}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.applyPeriodic(&set); err != nil {
			return nil, err
		}
	}
	if err := checkKind(set.kind); err != nil {
		return nil, err
	}
	c, err := parseCron(spec, set.loc, set.locSet)
	if err != nil {
		return nil, err
	}
	if c.next(s.now()).IsZero() {
		return nil, fmt.Errorf("%w: spec %q never fires", ErrInvalidSchedule, spec)
	}
	b, err := encodePayload(payload)
	if err != nil {
		return nil, err
	}
	if _, ok := s.store.(store.PeriodicStore); !ok {
		return nil, fmt.Errorf("%w (%T)", ErrPeriodicUnsupported, s.store)
	}
	stored := spec
	if set.locSet && set.loc != time.UTC {
		stored = "CRON_TZ=" + set.loc.String() + " " + spec
	}
	return &schedule{
		name: name, kind: set.kind, stored: stored, cron: c,
		payload: b, opts: set.jobOpts, misfire: set.misfire, since: s.now(),
	}, nil
}

// periodicTimeout bounds one store call of the periodic loop.
const periodicTimeout = 30 * time.Second

// periodicFailure is a failed step of declaring a schedule or firing its
// ticks.
type periodicFailure struct {
	step  string // "declare schedule", "fire ticks", ...
	build bool   // the schedule's job could not be built: not the store's doing
	err   error
}

func (f *periodicFailure) Error() string { return f.step + ": " + f.err.Error() }
func (f *periodicFailure) Unwrap() error { return f.err }

func storeFailure(step string, err error) error { return &periodicFailure{step: step, err: err} }
func buildFailure(step string, err error) error {
	return &periodicFailure{step: step, build: true, err: err}
}

// logPeriodic logs a failed periodic step: a job that cannot be built as
// an error, a store error as a warning (none once ctx ended: the loop is
// stopping).
func (r *runtime) logPeriodic(ctx context.Context, log *zap.Logger, err error) {
	var f *periodicFailure
	if !errors.As(err, &f) {
		f = &periodicFailure{step: "round", err: err}
	}
	if f.build {
		log.Error("periodic: "+f.step, zap.Error(f.err))
		return
	}
	if ctx.Err() == nil {
		log.Warn("periodic: "+f.step, zap.Error(f.err))
	}
}

// inlineRuntime is a runtime for the periodic steps that run on the
// caller's goroutine (Start's declarations, RunDue's ticks): it has no
// loops of its own.
func (s *Scheduler) inlineRuntime() *runtime {
	return &runtime{s: s, store: s.store, cfg: s.cfg, log: s.log}
}

// declarePeriodic declares in the store, for Start, the schedules declared
// on s and not yet in the store, so that once Start returns they exist
// there (Admin.Schedules lists them) and count their ticks from then on.
// The periodic loop declares those Every adds later.
func (s *Scheduler) declarePeriodic(ctx context.Context) error {
	ps, ok := s.store.(store.PeriodicStore)
	if !ok {
		return nil // Every refuses schedules on such stores
	}
	p := &s.periodic
	scheds := p.snapshot()
	if len(scheds) == 0 {
		return nil
	}
	p.fireMu.Lock()
	defer p.fireMu.Unlock()
	r := s.inlineRuntime()
	for _, sc := range scheds {
		if sc.declared {
			continue
		}
		if err := r.declareSchedule(ctx, ps, sc, r.log.With(zap.String("schedule", sc.name))); err != nil {
			return fmt.Errorf("periodic schedule %q: %w", sc.name, err)
		}
	}
	return nil
}

// firePeriodicDue fires, for RunDue on a Scheduler not started, the ticks
// of its schedules due at the store's now, as the periodic loop of a
// started Scheduler waking now would: one round, each schedule's
// MisfirePolicy applying to the ticks passed since the previous round. A
// schedule the store does not know yet starts at its Every call rather
// than at this round, so that a test can declare it, move its clock past a
// tick, and have the tick fire.
func (s *Scheduler) firePeriodicDue(ctx context.Context) error {
	ps, ok := s.store.(store.PeriodicStore)
	if !ok {
		return nil
	}
	p := &s.periodic
	scheds := p.snapshot()
	if len(scheds) == 0 {
		return nil
	}
	p.fireMu.Lock()
	defer p.fireMu.Unlock()
	r := s.inlineRuntime()
	if err := r.readStoreClock(ctx); err != nil {
		return fmt.Errorf("fire periodic ticks: read store clock: %w", err)
	}
	for _, sc := range scheds {
		log := r.log.With(zap.String("schedule", sc.name))
		if err := r.fireInline(ctx, ps, sc, log); err != nil {
			return fmt.Errorf("fire periodic ticks: schedule %q: %w", sc.name, err)
		}
	}
	return nil
}

// fireInline is firePeriodicDue's round for one schedule.
func (r *runtime) fireInline(ctx context.Context, ps store.PeriodicStore, sc *schedule, log *zap.Logger) error {
	if !sc.declared {
		_, err := ps.PeriodicState(ctx, sc.name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Fire the ticks since the Every call first: a declaration
			// would start the schedule now and pass over them.
			sc.last = sc.since
			if _, err := r.fireTicks(ctx, ps, sc, log); err != nil {
				return err
			}
		case err != nil:
			return storeFailure("read schedule state", err)
		}
		if err := r.declareSchedule(ctx, ps, sc, log); err != nil {
			return err
		}
	}
	_, err := r.fireTicks(ctx, ps, sc, log)
	return err
}

// startPeriodic starts the periodic loop; stopPeriodic stops it and waits.
// Both are called once, by the runtime's start and stop.
func (r *runtime) startPeriodic() {
	ps, ok := r.store.(store.PeriodicStore)
	if !ok {
		return // Every refuses schedules on such stores
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	p := &r.s.periodic
	p.mu.Lock()
	p.initLocked()
	p.cancel, p.done = cancel, done
	changed := p.changed
	p.mu.Unlock()
	go func() {
		defer close(done)
		r.periodicLoop(ctx, ps, changed)
	}()
}

func (r *runtime) stopPeriodic() {
	p := &r.s.periodic
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// periodicLoop fires the schedules' ticks until ctx is cancelled.
func (r *runtime) periodicLoop(ctx context.Context, ps store.PeriodicStore, changed <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer.C:
		}
		timer.Reset(r.periodicRound(ctx, ps))
	}
}

// periodicRound fires what is due and returns how long to sleep: until the
// earliest next tick, at most PollInterval.
func (r *runtime) periodicRound(ctx context.Context, ps store.PeriodicStore) time.Duration {
	scheds := r.s.periodic.snapshot()
	if len(scheds) == 0 {
		return time.Hour // Every wakes the loop
	}
	wait := r.cfg.PollInterval
	p := &r.s.periodic
	p.fireMu.Lock()
	defer p.fireMu.Unlock()
	if r.s.now().Sub(p.storeRead) >= r.cfg.PollInterval {
		// Nothing read the store's clock lately: the host's clock may
		// have been stepped since.
		if err := r.readStoreClock(ctx); err != nil {
			r.logStoreError(ctx, "periodic: read store clock", err)
			return wait
		}
	}
	for _, sc := range scheds {
		if ctx.Err() != nil {
			return wait
		}
		wait = min(wait, r.tickSchedule(ctx, ps, sc))
	}
	return max(wait, time.Millisecond)
}

// storeNow estimates the store's clock from the host's.
func (r *runtime) storeNow() time.Time {
	return r.s.now().Add(time.Duration(r.s.storeOffset.Load()))
}

// readStoreClock measures the store's clock offset.
func (r *runtime) readStoreClock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, periodicTimeout)
	defer cancel()
	before := r.s.now()
	now, err := r.store.Now(ctx)
	if err != nil {
		return err
	}
	r.measured(before, now)
	return nil
}

// measured records a store clock reading taken from host time before to
// now. The caller holds periodicSet.fireMu.
func (r *runtime) measured(before, storeNow time.Time) {
	after := r.s.now()
	r.s.measureOffset(before, after, storeNow)
	r.s.periodic.storeRead = after
}

func (r *runtime) logStoreError(ctx context.Context, msg string, err error) {
	if ctx.Err() == nil {
		r.log.Warn(msg, zap.Error(err))
	}
}

// tickSchedule declares sc if not yet done, fires its due ticks, and
// returns how long until its next tick; after a failed step, logged, it
// returns PollInterval, to try again then.
func (r *runtime) tickSchedule(ctx context.Context, ps store.PeriodicStore, sc *schedule) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, periodicTimeout)
	defer cancel()
	log := r.log.With(zap.String("schedule", sc.name))
	if !sc.declared {
		if err := r.declareSchedule(ctx, ps, sc, log); err != nil {
			r.logPeriodic(ctx, log, err)
			return r.cfg.PollInterval
		}
	}
	wait, err := r.fireTicks(ctx, ps, sc, log)
	if err != nil {
		r.logPeriodic(ctx, log, err)
		return r.cfg.PollInterval
	}
	return wait
}

// declareSchedule records sc in the store (store.PeriodicStore's
// DeclarePeriodic) with the template of its jobs, and learns its stored
// last tick.
func (r *runtime) declareSchedule(ctx context.Context, ps store.PeriodicStore, sc *schedule, log *zap.Logger) error {
	before := r.s.now()
	tmpl, err := r.s.insertParam(ctx, Request{Kind: sc.kind, Payload: sc.payload, Options: sc.opts}, nil)
	if err == nil {
		tmpl, err = r.s.sealedTemplate(tmpl, sc.name) // encryption.go
	}
	if err != nil {
		return buildFailure("build job template", err)
	}
	d, err := ps.DeclarePeriodic(ctx, &store.DeclarePeriodicParams{Name: sc.name, Spec: sc.stored, Job: &tmpl})
	if err != nil {
		return storeFailure("declare schedule", err)
	}
	r.measured(before, d.Now)
	sc.declared, sc.last = true, d.State.LastTick
	switch {
	case d.Created:
		log.Info("periodic schedule created", zap.String("spec", sc.stored))
	case d.PreviousSpec != sc.stored:
		log.Info("periodic schedule spec changed", zap.String("spec", sc.stored),
			zap.String("previous_spec", d.PreviousSpec), zap.Time("last_tick", sc.last))
	}
	return nil
}

// fireTicks fires sc's ticks due at the store's now, from its last tick
// as last seen, and returns how long until its next tick.
func (r *runtime) fireTicks(ctx context.Context, ps store.PeriodicStore, sc *schedule, log *zap.Logger) (time.Duration, error) {
	now := r.storeNow()
	ticks := r.dueTicks(sc, now, log)
	if len(ticks) == 0 {
		return r.untilNextTick(sc, now), nil
	}
	params := &store.FirePeriodicParams{Name: sc.name, Spec: sc.stored, Ticks: ticks}
	for i := range ticks {
		if ticks[i].Job == nil {
			continue
		}
		job, err := r.periodicJob(ctx, sc, ticks[i].At)
		if err != nil {
			return 0, buildFailure("build job", err)
		}
		ticks[i].Job = &job
	}
	before := r.s.now()
	res, err := ps.FirePeriodic(ctx, params)
	if err != nil {
		return 0, storeFailure("fire ticks", err)
	}
	r.measured(before, res.Now)
	if res.LastTick.After(sc.last) {
		sc.last = res.LastTick
	}
	var (
		jobs    []store.InsertParams
		results []store.InsertResult
	)
	for i, applied := range res.Applied {
		switch {
		case !applied:
		case ticks[i].Job == nil:
			log.Info("periodic tick skipped (misfire)", zap.Time("tick", ticks[i].At))
		case res.Jobs[i].ID == uuid.Nil:
			// The store applied the tick without its job: an operator
			// paused the schedule (Admin.PauseSchedule).
			log.Info("periodic tick passed without a job: schedule paused", zap.Time("tick", ticks[i].At))
		default:
			jobs = append(jobs, *ticks[i].Job)
			results = append(results, res.Jobs[i])
		}
	}
	r.s.scheduled(jobs, results)
	if latest := ticks[len(ticks)-1].At; latest.After(res.Now) && latest.After(sc.last) {
		// The store's clock has not reached the tick: try when it has.
		return latest.Sub(res.Now), nil
	}
	return r.untilNextTick(sc, r.storeNow()), nil
}

// dueTicks returns the ticks of sc to fire at store time now, by its
// misfire policy, with a placeholder Job for those that get one.
func (r *runtime) dueTicks(sc *schedule, now time.Time, log *zap.Logger) []store.PeriodicTick {
	n := 1
	if sc.misfire.mode == misfireRunAll {
		n = sc.misfire.bound
	}
	ats := sc.cron.latest(sc.last, now, n)
	if len(ats) == 0 {
		return nil
	}
	ticks := make([]store.PeriodicTick, len(ats))
	for i, at := range ats {
		ticks[i] = store.PeriodicTick{At: at, Job: &store.InsertParams{}}
	}
	if sc.misfire.mode == misfireSkip && now.Sub(ats[0]) > MisfireGrace {
		ticks[0].Job = nil
	}
	if first := sc.cron.next(sc.last); first.Before(ats[0]) {
		log.Info("periodic ticks missed", zap.Stringer("misfire", sc.misfire),
			zap.Time("last_tick", sc.last), zap.Time("first_missed", first), zap.Time("firing", ats[0]))
	}
	return ticks
}

// untilNextTick returns how long until sc's next tick after store time now.
func (r *runtime) untilNextTick(sc *schedule, now time.Time) time.Duration {
	from := sc.last
	if now.After(from) {
		from = now
	}
	next := sc.cron.next(from)
	if next.IsZero() {
		return r.cfg.PollInterval
	}
	return next.Sub(now)
}

// periodicJob returns the job of sc's tick at.
func (r *runtime) periodicJob(ctx context.Context, sc *schedule, at time.Time) (store.InsertParams, error) {
	opts := append(append([]ScheduleOption(nil), sc.opts...), At(at), uniqueKeyOption(periodicKey(sc.name, at)))
	return r.s.insertParam(ctx, Request{Kind: sc.kind, Payload: sc.payload, Options: opts}, nil)
}

// periodicKeyPrefix starts the unique key of every periodic job. UniqueKey
// refuses it, so a key with it always names a schedule and its tick.
const periodicKeyPrefix = "periodic:"

// periodicKey is the unique key of schedule name's job for tick:
// "periodic:<name>:<tick in UTC, RFC 3339 with fractional seconds>".
func periodicKey(name string, tick time.Time) string {
	return periodicKeyPrefix + name + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// parsePeriodicKey returns the schedule and tick a periodic job's unique
// key names, or zero values for any other key. Names may contain ':', and
// so does the tick, which ends the key: in UTC it has exactly two (hh:mm:ss),
// so the separator is the third colon from the end. The key of a manual
// run (Admin.TriggerSchedule) names no tick: "periodic:<name>:manual".
func parsePeriodicKey(key string) (name string, tick time.Time) {
	rest, ok := strings.CutPrefix(key, periodicKeyPrefix)
	if !ok {
		return "", time.Time{}
	}
	if name, ok := strings.CutSuffix(rest, manualKeySuffix); ok && name != "" {
		return name, time.Time{}
	}
	i := strings.LastIndexByte(rest, ':')
	for range 2 {
		if i <= 0 {
			return "", time.Time{}
		}
		i = strings.LastIndexByte(rest[:i], ':')
	}
	if i <= 0 {
		return "", time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, rest[i+1:])
	if err != nil {
		return "", time.Time{}
	}
	return rest[:i], t
}
