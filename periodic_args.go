package ax

import (
	"fmt"
	"reflect"
	"time"

	"github.com/axsched/ax/store"
)

// EveryArgs declares the periodic schedule name, as Scheduler.Every does,
// whose jobs are of args.Kind() with args as their payload (encoded once,
// now): a typed schedule, handled by HandleArgs with the same type.
//
//	ax.EveryArgs(s, "nightly-report", "0 3 * * *", ReportArgs{Scope: "all"})
//
// The type's own options (JobArgsWithOptions), read once, apply to each
// tick's job before opts, so opts win: those Every takes for its jobs
// (Priority, MaxAttempts, Metadata, SecretMetadata) are used; those the
// schedule sets itself for each job are left out (In and At: the job is
// due at its tick; UniqueKey and the unique scopes: the job's key is the
// tick's, which already makes one job per tick); any other
// (FollowUp, Sequential, WaitForCapacity) is an error wrapping
// ErrInvalidOption, since a schedule's jobs cannot have it. JobKind in
// opts is an error wrapping ErrInvalidOption: the kind is args'.
//
// Errors are Every's, plus ErrInvalidKind for an args whose Kind panics.
func EveryArgs[A JobArgs](s *Scheduler, name, spec string, args A, opts ...PeriodicOption) error {
	kind, err := kindOf(args)
	if err != nil {
		return fmt.Errorf("every %q: %w", name, err)
	}
	own, err := ownOptions(args)
	if err != nil {
		return fmt.Errorf("every %q: %w", name, err)
	}
	all := make([]PeriodicOption, 0, len(own)+len(opts)+1)
	for _, o := range own {
		po, err := periodicJobOption(o)
		if err != nil {
			return fmt.Errorf("every %q: %T's ScheduleOptions: %w", name, args, err)
		}
		if po != nil {
			all = append(all, po)
		}
	}
	var probe periodicSettings
	for _, o := range opts {
		if o == nil {
			continue // Every says so
		}
		if err := o.applyPeriodic(&probe); err != nil {
			return fmt.Errorf("every %q: %w", name, err)
		}
	}
	if probe.kind != "" {
		return fmt.Errorf("every %q: %w: JobKind(%q) with EveryArgs, whose jobs are of args' kind %q", name, ErrInvalidOption, probe.kind, kind)
	}
	all = append(append(all, opts...), JobKind(kind))
	return s.Every(name, spec, args, all...)
}

// periodicJobOption returns o as an option of each job of a schedule, nil
// when the schedule sets what o sets (the job's time, its unique key and
// scope), or an error wrapping ErrInvalidOption when a schedule's jobs
// cannot have it.
func periodicJobOption(o ScheduleOption) (PeriodicOption, error) {
	if o == nil {
		return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
	}
	if po, ok := o.(PeriodicOption); ok {
		return po, nil
	}
	var set scheduleSettings
	if err := o.applySchedule(&set); err != nil {
		return nil, err
	}
	if _, ok := o.(waitOption); ok {
		return nil, fmt.Errorf("%w: WaitForCapacity is not an option of a periodic schedule's jobs", ErrInvalidOption)
	}
	// What the schedule sets for each job itself.
	set.delay, set.runAt = 0, time.Time{}
	set.uniqueKey, set.unique, set.uniqueSet = "", store.UniqueScope{}, false
	if !reflect.ValueOf(set).IsZero() {
		return nil, fmt.Errorf("%w: %s is not an option of a periodic schedule's jobs", ErrInvalidOption, settingName(set))
	}
	return nil, nil
}

// settingName names what an option refused by periodicJobOption sets.
func settingName(set scheduleSettings) string {
	switch {
	case len(set.followUps) > 0:
		return "FollowUp"
	case set.sequenceKey != "":
		return "Sequential"
	}
	return "the option"
}
