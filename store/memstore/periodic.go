package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/axsched/ax/store"
)

var _ store.PeriodicStore = (*Store)(nil)

// periodicStates holds the state of periodic schedules. Its lock is held
// across a whole fire (read the last tick, insert the jobs, advance the
// tick), so fires of one store are serialized and all-or-nothing. It is
// always taken before Store.mu, never while holding it.
type periodicStates struct {
	mu     sync.Mutex
	states map[string]*store.PeriodicState
}

// DeclarePeriodic implements store.PeriodicStore: an unknown name is
// created with LastTick = store now; a known one gets spec recorded. An
// empty name, or a name or spec that is not a storable text
// (store.CheckText), fails with an error wrapping store.ErrInvalidParams.
func (s *Store) DeclarePeriodic(ctx context.Context, params *store.DeclarePeriodicParams) (*store.PeriodicDeclaration, error) {
	if params == nil {
		return nil, fmt.Errorf("declare periodic schedule: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("declare periodic schedule: %w", err)
	}
	name, spec := params.Name, params.Spec
	if name == "" {
		return nil, fmt.Errorf("declare periodic schedule: %w: empty name", store.ErrInvalidParams)
	}
	if err := checkTexts(name, spec); err != nil {
		return nil, fmt.Errorf("declare periodic schedule: %w", err)
	}
	p := &s.periodic
	p.mu.Lock()
	defer p.mu.Unlock()
	now, err := s.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("declare periodic schedule %q: %w", name, err)
	}
	d := &store.PeriodicDeclaration{Now: now}
	st := p.states[name]
	switch {
	case st == nil:
		st = &store.PeriodicState{Name: name, Spec: spec, LastTick: now, UpdatedAt: now}
		if p.states == nil {
			p.states = make(map[string]*store.PeriodicState)
		}
		p.states[name] = st
		d.Created = true
	case st.Spec != spec:
		d.PreviousSpec = st.Spec
		st.Spec, st.UpdatedAt = spec, now
	default:
		d.PreviousSpec = st.Spec
	}
	d.State = *st
	return d, nil
}

// FirePeriodic implements store.PeriodicStore. The jobs of the applied
// ticks go through Insert (so their ScheduledAt is their RunAt, the tick);
// when it fails, the last tick is left as it was. Params that
// FirePeriodicParams.Validate refuses, or a name or spec that is not a
// storable text, fail with an error wrapping store.ErrInvalidParams.
func (s *Store) FirePeriodic(ctx context.Context, params *store.FirePeriodicParams) (*store.FirePeriodicResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("fire periodic schedule %q: %w", params.Name, err)
	}
	if err := checkTexts(params.Name, params.Spec); err != nil {
		return nil, fmt.Errorf("fire periodic schedule: %w", err)
	}
	p := &s.periodic
	p.mu.Lock()
	defer p.mu.Unlock()
	now, err := s.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("fire periodic schedule %q: %w", params.Name, err)
	}
	st := p.states[params.Name]
	res := &store.FirePeriodicResult{
		Applied: make([]bool, len(params.Ticks)),
		Jobs:    make([]store.InsertResult, len(params.Ticks)),
		Now:     now,
	}
	if st != nil {
		res.LastTick = st.LastTick
	}
	var (
		jobs    []store.InsertParams
		jobOf   []int // tick index of each job
		latest  time.Time
		applied bool
	)
	for i, tk := range params.Ticks {
		at := stamp(tk.At)
		if (st != nil && !at.After(st.LastTick)) || at.After(now) {
			continue
		}
		res.Applied[i], latest, applied = true, at, true
		if tk.Job != nil {
			jobs = append(jobs, *tk.Job)
			jobOf = append(jobOf, i)
		}
	}
	if !applied {
		return res, nil
	}
	if len(jobs) > 0 {
		inserted, err := s.Insert(ctx, jobs)
		if err != nil {
			return nil, fmt.Errorf("fire periodic schedule %q: %w", params.Name, err)
		}
		for k, r := range inserted {
			res.Jobs[jobOf[k]] = r
		}
	}
	if st == nil {
		st = &store.PeriodicState{Name: params.Name}
		if p.states == nil {
			p.states = make(map[string]*store.PeriodicState)
		}
		p.states[params.Name] = st
	}
	st.Spec, st.LastTick, st.UpdatedAt = params.Spec, latest, now
	res.LastTick = latest
	return res, nil
}

// PeriodicState implements store.PeriodicStore. A name that is not a
// storable text fails with an error wrapping store.ErrInvalidParams.
func (s *Store) PeriodicState(ctx context.Context, name string) (*store.PeriodicState, error) {
	if err := checkTexts(name); err != nil {
		return nil, fmt.Errorf("periodic schedule: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("periodic schedule %q: %w", name, err)
	}
	s.mu.Unlock()
	p := &s.periodic
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.states[name]
	if st == nil {
		return nil, fmt.Errorf("periodic schedule %q: %w", name, store.ErrNotFound)
	}
	c := *st
	return &c, nil
}
