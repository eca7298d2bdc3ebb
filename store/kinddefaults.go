package store

import (
	"context"
	"fmt"
	"time"
)

// KindDefaults is what the handlers of a kind declare for its jobs that
// do not set their own: the attempts they get and their priority. Hosts
// that handle the kind store them at their start (KindDefaulter); a host
// that schedules a job of a kind it does not handle reads them, so the
// job gets the same values whoever scheduled it. Timeouts and retry
// policies need no storing: the host that runs an attempt applies its
// own, whoever scheduled the job.
type KindDefaults struct {
	// Kind names the kind.
	Kind string `json:"kind"`
	// MaxAttempts is the kind's MaxAttempts, from 1 to MaxAttemptsLimit.
	MaxAttempts int `json:"max_attempts"`
	// Priority is the kind's default priority: PriorityHigh,
	// PriorityNormal or PriorityLow.
	Priority int `json:"priority"`
	// UpdatedAt is when the defaults were last declared (store clock); set
	// by the store, ignored by DeclareKindDefaults.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Validate reports, wrapping ErrInvalidParams, the first problem with d.
func (d *KindDefaults) Validate() error {
	switch {
	case d.Kind == "":
		return fmt.Errorf("%w: kind defaults of an empty kind", ErrInvalidParams)
	case d.MaxAttempts < 1 || d.MaxAttempts > MaxAttemptsLimit:
		return fmt.Errorf("%w: kind %q: max attempts %d not in [1, %d]", ErrInvalidParams, d.Kind, d.MaxAttempts, MaxAttemptsLimit)
	case d.Priority < PriorityHigh || d.Priority > PriorityLow:
		return fmt.Errorf("%w: kind %q: priority %d not in [%d, %d]", ErrInvalidParams, d.Kind, d.Priority, PriorityHigh, PriorityLow)
	}
	if err := CheckText(d.Kind, MaxKindLength); err != nil {
		return fmt.Errorf("%w: kind defaults: %w", ErrInvalidParams, err)
	}
	return nil
}

// KindDefaulter is implemented by stores that keep each kind's job
// defaults (KindDefaults), cluster-wide. It is optional: without it, a
// host that does not handle a kind schedules its jobs with its own
// configuration's defaults.
//
// Nothing else reads the defaults: a job's MaxAttempts and Priority are
// stored in its row when it is inserted (InsertParams), so hosts of any
// version read the same row, and changing a kind's defaults changes only
// jobs scheduled afterwards.
type KindDefaulter interface {
	// DeclareKindDefaults stores each kind's defaults, replacing what was
	// stored for it (the last writer wins), in one atomic operation. A
	// kind given twice, or invalid defaults (KindDefaults.Validate), fail
	// with ErrInvalidParams and store nothing.
	DeclareKindDefaults(ctx context.Context, defaults []KindDefaults) error

	// KindDefaults returns the stored defaults of those of kinds that
	// have some, ordered by kind; kinds without stored defaults are left
	// out.
	KindDefaults(ctx context.Context, kinds []string) ([]KindDefaults, error)
}

// ValidateKindDefaults reports, wrapping ErrInvalidParams, the first
// problem with a DeclareKindDefaults call's defaults: an invalid entry or
// a kind given twice.
func ValidateKindDefaults(defaults []KindDefaults) error {
	seen := make(map[string]bool, len(defaults))
	for i := range defaults {
		if err := defaults[i].Validate(); err != nil {
			return err
		}
		if seen[defaults[i].Kind] {
			return fmt.Errorf("%w: kind %q declared twice", ErrInvalidParams, defaults[i].Kind)
		}
		seen[defaults[i].Kind] = true
	}
	return nil
}
