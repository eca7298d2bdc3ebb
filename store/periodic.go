package store

import (
	"context"
	"fmt"
	"time"
)

// PeriodicStore is implemented by stores that keep the state of periodic
// schedules: per schedule name, the last tick fired. That stored tick is
// the guard that makes a schedule yield at most one job per tick, however
// many hosts declare it, whatever their clocks say, and long after the
// tick's job ended (a periodic job's unique key has the default scope: it
// guards only while the job is live).
//
// A schedule's state moves only forward:
//
//	(unknown) ──DeclarePeriodic──▶ LastTick = DeclarationTick(store now) (ticks up to the first declaration never fire)
//	(unknown) ──FirePeriodic─────▶ LastTick = latest tick applied
//	LastTick = T ──FirePeriodic(ticks in (T, store now])──▶ LastTick = latest of them, their jobs inserted
//	LastTick = T ──FirePeriodic(ticks <= T or > store now)──▶ unchanged, nothing inserted
type PeriodicStore interface {
	// DeclarePeriodic records that a host declares the schedule
	// params.Name with params.Spec and job template params.Job. An unknown
	// name is created with LastTick = DeclarationTick(store now) (store
	// now, off whole seconds); a known one keeps its
	// LastTick (and Paused) and gets spec and template recorded (a nil
	// params.Job keeps the template recorded before, so that a host of
	// an older version does not erase it). The template is stored
	// without ID, RunAt, Delay and UniqueKey. It reports the state
	// afterwards and the spec recorded before. Invalid params fail with
	// ErrInvalidParams.
	DeclarePeriodic(ctx context.Context, params *DeclarePeriodicParams) (*PeriodicDeclaration, error)

	// FirePeriodic applies, in one atomic operation, the ticks of
	// params that are after the schedule's stored LastTick and not after
	// store now: LastTick becomes the latest of them and their jobs are
	// inserted (as Insert would, a held unique key yielding a duplicate
	// rather than an error) — unless the schedule is Paused, when the
	// ticks are applied without their jobs. Ticks at or before LastTick,
	// or after store now, change nothing. Either all of this happens or nothing does, so
	// a stored tick always has its job and a job's tick is always stored.
	// An unknown name has no LastTick yet: any tick not after store now is
	// applied, and creates its state.
	// Invalid params (see FirePeriodicParams.Validate) fail the call with
	// ErrInvalidParams.
	FirePeriodic(ctx context.Context, params *FirePeriodicParams) (*FirePeriodicResult, error)

	// PeriodicState returns the stored state of the schedule name, or
	// ErrNotFound.
	PeriodicState(ctx context.Context, name string) (*PeriodicState, error)
}

// PeriodicState is the stored state of one periodic schedule.
type PeriodicState struct {
	// Name identifies the schedule.
	Name string `json:"name"`
	// Spec is the spec recorded by the latest declaration or fire.
	Spec string `json:"spec"`
	// LastTick is the latest tick fired (or skipped by a misfire policy),
	// or, before any, the time of the first declaration (store clock,
	// see DeclarationTick; Ticked tells the two apart).
	LastTick time.Time `json:"last_tick"`
	// UpdatedAt is when the state last changed (store clock).
	UpdatedAt time.Time `json:"updated_at"`
	// Paused reports that an operator paused the schedule (see
	// PeriodicController): its ticks pass without jobs.
	Paused bool `json:"paused"`
	// Job is the template of the schedule's jobs as the latest
	// declaration recorded it (ID, RunAt, Delay and UniqueKey unset), for
	// operators and for triggering a run by hand; nil when no declaration
	// recorded one.
	Job *InsertParams `json:"job,omitempty"`
}

// DeclarationTick is the LastTick a declaration at store time now gives
// a new schedule: now, or now plus a microsecond when now falls on a
// whole second. The ticks AX fires are whole seconds (cron fields and
// @every intervals have no fraction), so a declaration's LastTick is
// never a tick's, and a tick at now does not fire either way (ticks up to
// LastTick never do).
func DeclarationTick(now time.Time) time.Time {
	if now.Truncate(time.Second).Equal(now) {
		return now.Add(time.Microsecond)
	}
	return now
}

// Ticked reports whether a stored LastTick is a tick's (a whole second)
// rather than the first declaration's (DeclarationTick). A schedule
// declared by a store of an older AX at a whole second of its clock (one
// in a million) reads as ticked.
func Ticked(last time.Time) bool {
	return !last.IsZero() && last.Truncate(time.Second).Equal(last)
}

// DeclarePeriodicParams declares a periodic schedule.
type DeclarePeriodicParams struct {
	// Name identifies the schedule: a non-empty text (CheckText) of at
	// most MaxKindLength bytes.
	Name string
	// Spec is the schedule's spec, recorded as given (a text).
	Spec string
	// Job, optional, is the template of the schedule's jobs: Kind,
	// Payload, Metadata, Priority and MaxAttempts (ID, RunAt, Delay and
	// UniqueKey are ignored). It must otherwise pass
	// InsertParams.Validate.
	Job *InsertParams
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *DeclarePeriodicParams) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("%w: empty periodic schedule name", ErrInvalidParams)
	}
	if err := CheckText(p.Name, MaxKindLength); err != nil {
		return fmt.Errorf("%w: periodic schedule name: %w", ErrInvalidParams, err)
	}
	if err := CheckText(p.Spec, 0); err != nil {
		return fmt.Errorf("%w: periodic schedule spec: %w", ErrInvalidParams, err)
	}
	if p.Job != nil {
		tmpl := *p.Job
		if tmpl.ID == [16]byte{} {
			tmpl.ID = [16]byte{1} // a template has no ID of its own
		}
		tmpl.RunAt, tmpl.Delay, tmpl.UniqueKey = time.Time{}, 0, ""
		if err := tmpl.Validate(); err != nil {
			return fmt.Errorf("periodic schedule job: %w", err)
		}
	}
	return nil
}

// PeriodicDeclaration is what DeclarePeriodic found and did.
type PeriodicDeclaration struct {
	// State is the schedule's state after the call.
	State PeriodicState
	// Created reports that the schedule was unknown.
	Created bool
	// PreviousSpec is the spec recorded before the call; empty when
	// Created.
	PreviousSpec string
	// Now is the store's clock at the call.
	Now time.Time
}

// MaxPeriodicTicks bounds the ticks of one FirePeriodic call.
const MaxPeriodicTicks = 1000

// FirePeriodicParams asks to fire ticks of one schedule.
type FirePeriodicParams struct {
	// Name identifies the schedule: a non-empty text (CheckText) of at
	// most MaxKindLength bytes.
	Name string
	// Spec is recorded with the state.
	Spec string
	// Ticks are the ticks to fire, in strictly ascending order, at least
	// one and at most MaxPeriodicTicks.
	Ticks []PeriodicTick
}

// PeriodicTick is one tick to fire and its job.
type PeriodicTick struct {
	// At is the tick's instant; it must not be zero. Stores compare ticks
	// as instants, at microsecond precision.
	At time.Time
	// Job is inserted when the tick is applied. Nil advances LastTick
	// without a job (a tick skipped by a misfire policy).
	Job *InsertParams
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *FirePeriodicParams) Validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("%w: empty periodic schedule name", ErrInvalidParams)
	case len(p.Ticks) == 0:
		return fmt.Errorf("%w: no ticks to fire", ErrInvalidParams)
	case len(p.Ticks) > MaxPeriodicTicks:
		return fmt.Errorf("%w: %d ticks, more than %d", ErrInvalidParams, len(p.Ticks), MaxPeriodicTicks)
	}
	if err := CheckText(p.Name, MaxKindLength); err != nil {
		return fmt.Errorf("%w: periodic schedule name: %w", ErrInvalidParams, err)
	}
	if err := CheckText(p.Spec, 0); err != nil {
		return fmt.Errorf("%w: periodic schedule spec: %w", ErrInvalidParams, err)
	}
	for i, tk := range p.Ticks {
		if tk.At.IsZero() {
			return fmt.Errorf("%w: tick %d is the zero time", ErrInvalidParams, i)
		}
		if i > 0 && !tk.At.After(p.Ticks[i-1].At) {
			return fmt.Errorf("%w: tick %d (%s) is not after tick %d", ErrInvalidParams, i, tk.At, i-1)
		}
		if tk.Job != nil {
			if err := tk.Job.Validate(); err != nil {
				return fmt.Errorf("tick %d: %w", i, err)
			}
		}
	}
	return nil
}

// FirePeriodicResult reports what FirePeriodic did.
type FirePeriodicResult struct {
	// Applied[i] reports whether Ticks[i] was applied (after the stored
	// LastTick and not after store now).
	Applied []bool
	// Jobs[i] is the insert result of Ticks[i]'s job when it was applied
	// and had one; zero otherwise.
	Jobs []InsertResult
	// LastTick is the schedule's stored LastTick after the call.
	LastTick time.Time
	// Now is the store's clock at the call.
	Now time.Time
}
