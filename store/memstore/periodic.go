package memstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
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
// created with LastTick = store.DeclarationTick(store now); a known one gets spec recorded and
// keeps its LastTick and Paused. params.Job, when not nil, is recorded as
// the schedule's template (a copy, without ID, RunAt, Delay and
// UniqueKey); a nil one keeps the template recorded before. Params that
// DeclarePeriodicParams.Validate refuses fail with an error wrapping
// store.ErrInvalidParams.
func (s *Store) DeclarePeriodic(ctx context.Context, params *store.DeclarePeriodicParams) (*store.PeriodicDeclaration, error) {
	if params == nil {
		return nil, fmt.Errorf("declare periodic schedule: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("declare periodic schedule: %w", err)
	}
	name, spec := params.Name, params.Spec
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
		st = &store.PeriodicState{Name: name, Spec: spec, LastTick: store.DeclarationTick(now), UpdatedAt: now}
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
	if params.Job != nil {
		tmpl := copyInsert(params.Job)
		tmpl.ID, tmpl.RunAt, tmpl.Delay, tmpl.UniqueKey = uuid.Nil, time.Time{}, 0, ""
		st.Job = tmpl
	}
	d.State = copyPeriodic(st)
	return d, nil
}

// copyInsert returns a deep copy of p.
func copyInsert(p *store.InsertParams) *store.InsertParams {
	c := *p
	c.Payload = bytes.Clone(p.Payload)
	c.Metadata = maps.Clone(p.Metadata)
	return &c
}

// copyPeriodic returns a deep copy of st.
func copyPeriodic(st *store.PeriodicState) store.PeriodicState {
	c := *st
	if st.Job != nil {
		c.Job = copyInsert(st.Job)
	}
	return c
}

// FirePeriodic implements store.PeriodicStore. The jobs of the applied
// ticks go through Insert (so their ScheduledAt is their RunAt, the tick);
// when it fails, the last tick is left as it was. The ticks of a paused
// schedule are applied without their jobs. Params that
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
	if len(jobs) > 0 && (st == nil || !st.Paused) {
		inserted, err := s.insert(ctx, jobs, false)
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
	c := copyPeriodic(st)
	return &c, nil
}

// ListPeriodic returns copies of every schedule's state, ordered by name;
// see store.PeriodicController.
func (s *Store) ListPeriodic(ctx context.Context) ([]store.PeriodicState, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("list periodic schedules: %w", err)
	}
	s.mu.Unlock()
	p := &s.periodic
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]store.PeriodicState, 0, len(p.states))
	for _, st := range p.states {
		out = append(out, copyPeriodic(st))
	}
	slices.SortFunc(out, func(a, b store.PeriodicState) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// SetPeriodicPaused pauses or resumes the schedule name and returns its
// state afterwards; see store.PeriodicController. A change sets UpdatedAt;
// pausing a paused schedule (or resuming one that is not) changes
// nothing. An unknown name fails with an error wrapping
// store.ErrNotFound; an empty one, or one that is not a storable text,
// with store.ErrInvalidParams.
func (s *Store) SetPeriodicPaused(ctx context.Context, name string, paused bool) (*store.PeriodicState, error) {
	if name == "" {
		return nil, fmt.Errorf("pause periodic schedule: %w: empty name", store.ErrInvalidParams)
	}
	if err := store.CheckText(name, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("pause periodic schedule: %w: name: %w", store.ErrInvalidParams, err)
	}
	p := &s.periodic
	p.mu.Lock()
	defer p.mu.Unlock()
	now, err := s.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("pause periodic schedule %q: %w", name, err)
	}
	st := p.states[name]
	if st == nil {
		return nil, fmt.Errorf("pause periodic schedule %q: %w", name, store.ErrNotFound)
	}
	if st.Paused != paused {
		st.Paused, st.UpdatedAt = paused, now
	}
	c := copyPeriodic(st)
	return &c, nil
}
