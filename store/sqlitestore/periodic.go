package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// DeclarePeriodic implements store.PeriodicStore, in one transaction: an
// unknown name is created with LastTick = store.DeclarationTick(store now); a known one gets spec
// recorded and keeps its LastTick and Paused. params.Job, when not nil, is
// recorded as the schedule's template (without ID, RunAt, Delay and
// UniqueKey, payload byte for byte); a nil one keeps the template recorded
// before. Invalid params fail with an error wrapping
// store.ErrInvalidParams.
func (s *Store) DeclarePeriodic(ctx context.Context, params *store.DeclarePeriodicParams) (*store.PeriodicDeclaration, error) {
	if params == nil {
		return nil, fmt.Errorf("declare periodic schedule: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("declare periodic schedule: %w", err)
	}
	var tmpl *string
	if params.Job != nil {
		t := *params.Job
		t.ID, t.RunAt, t.Delay, t.UniqueKey = uuid.Nil, time.Time{}, 0, ""
		enc, err := encodeParams(&t)
		if err != nil {
			return nil, fmt.Errorf("declare periodic schedule %q: %w: template: %w", params.Name, store.ErrInvalidParams, err)
		}
		tmpl = &enc
	}
	var d *store.PeriodicDeclaration
	err := s.write(ctx, func(w *wtx) error {
		d = &store.PeriodicDeclaration{Now: w.now}
		st, raw, err := w.periodicState(params.Name)
		if err != nil {
			return err
		}
		switch {
		case st == nil:
			st = &store.PeriodicState{Name: params.Name, Spec: params.Spec, LastTick: store.DeclarationTick(w.now), UpdatedAt: w.now}
			d.Created = true
		case st.Spec != params.Spec:
			d.PreviousSpec = st.Spec
			st.Spec, st.UpdatedAt = params.Spec, w.now
		default:
			d.PreviousSpec = st.Spec
		}
		if tmpl != nil {
			raw = sql.NullString{String: *tmpl, Valid: true}
		}
		if err := w.putPeriodic(st, raw); err != nil {
			return err
		}
		if raw.Valid {
			if st.Job, err = decodeParams(raw.String); err != nil {
				return err
			}
		}
		d.State = *st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("declare periodic schedule %q: %w", params.Name, err)
	}
	return d, nil
}

// periodicState reads the named schedule's state (without its template)
// and its raw template, or nil.
func (w *wtx) periodicState(name string) (*store.PeriodicState, sql.NullString, error) {
	st, raw, err := scanPeriodic(w.queryRow(qPeriodicGet, name))
	if isNoRows(err) {
		return nil, raw, nil
	}
	return st, raw, err
}

func (w *wtx) putPeriodic(st *store.PeriodicState, tmpl sql.NullString) error {
	_, err := w.exec(qPeriodicPut, st.Name, st.Spec, toUS(st.LastTick), toUS(st.UpdatedAt), boolInt(st.Paused), tmpl)
	return err
}

// scanPeriodic reads one row of the periodic table; the template is
// returned raw.
func scanPeriodic(sc scanner) (*store.PeriodicState, sql.NullString, error) {
	var (
		st            store.PeriodicState
		last, updated int64
		paused        int64
		tmpl          sql.NullString
	)
	if err := sc.Scan(&st.Name, &st.Spec, &last, &updated, &paused, &tmpl); err != nil {
		return nil, tmpl, err
	}
	st.LastTick, st.UpdatedAt, st.Paused = fromUS(last), fromUS(updated), paused != 0
	return &st, tmpl, nil
}

// withTemplate decodes raw into st.Job.
func withTemplate(st *store.PeriodicState, raw sql.NullString) (*store.PeriodicState, error) {
	if raw.Valid {
		var err error
		if st.Job, err = decodeParams(raw.String); err != nil {
			return nil, fmt.Errorf("schedule %q template: %w", st.Name, err)
		}
	}
	return st, nil
}

// FirePeriodic implements store.PeriodicStore, in one transaction: the
// ticks after the stored LastTick and not after the store's now are
// applied, LastTick becomes the latest of them, and their jobs are
// inserted as Insert would (a held unique key yields a duplicate), unless
// the schedule is paused, when the ticks pass without jobs. A failed
// insert rolls the whole call back. Ticks are compared at microsecond
// precision. Invalid params fail with an error wrapping
// store.ErrInvalidParams.
func (s *Store) FirePeriodic(ctx context.Context, params *store.FirePeriodicParams) (*store.FirePeriodicResult, error) {
	if params == nil {
		return nil, fmt.Errorf("fire periodic schedule: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("fire periodic schedule %q: %w", params.Name, err)
	}
	var res *store.FirePeriodicResult
	err := s.write(ctx, func(w *wtx) error {
		st, raw, err := w.periodicState(params.Name)
		if err != nil {
			return err
		}
		res = &store.FirePeriodicResult{
			Applied: make([]bool, len(params.Ticks)),
			Jobs:    make([]store.InsertResult, len(params.Ticks)),
			Now:     w.now,
		}
		if st != nil {
			res.LastTick = st.LastTick
		}
		var latest time.Time
		applied := false
		for i, tk := range params.Ticks {
			at := fromUS(tk.At.UnixMicro())
			if (st != nil && !at.After(st.LastTick)) || at.After(w.now) {
				continue
			}
			res.Applied[i], latest, applied = true, at, true
			if tk.Job == nil || (st != nil && st.Paused) {
				continue
			}
			r, err := w.insertRow(tk.Job, uuid.Nil, uuid.Nil, false)
			if err != nil {
				return fmt.Errorf("tick %d: %w", i, err)
			}
			res.Jobs[i] = r
		}
		if !applied {
			return nil
		}
		if st == nil {
			st = &store.PeriodicState{Name: params.Name}
		}
		st.Spec, st.LastTick, st.UpdatedAt = params.Spec, latest, w.now
		res.LastTick = latest
		return w.putPeriodic(st, raw)
	})
	if err != nil {
		return nil, fmt.Errorf("fire periodic schedule %q: %w", params.Name, err)
	}
	return res, nil
}

// PeriodicState implements store.PeriodicStore. A name that is not a
// storable text fails with an error wrapping store.ErrInvalidParams.
func (s *Store) PeriodicState(ctx context.Context, name string) (*store.PeriodicState, error) {
	if err := checkNames(name); err != nil {
		return nil, fmt.Errorf("periodic schedule: %w", err)
	}
	var out *store.PeriodicState
	err := s.read(ctx, false, func(r *rtx) error {
		st, raw, err := scanPeriodic(r.queryRow(qPeriodicGet, name))
		if isNoRows(err) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		out, err = withTemplate(st, raw)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("periodic schedule %q: %w", name, err)
	}
	return out, nil
}

// ListPeriodic returns every schedule's state, ordered by name; see
// store.PeriodicController.
func (s *Store) ListPeriodic(ctx context.Context) ([]store.PeriodicState, error) {
	out := []store.PeriodicState{}
	err := s.read(ctx, false, func(r *rtx) error {
		rows, err := r.query(qPeriodicAll)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			st, raw, err := scanPeriodic(rows)
			if err != nil {
				return err
			}
			if st, err = withTemplate(st, raw); err != nil {
				return err
			}
			out = append(out, *st)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list periodic schedules: %w", err)
	}
	return out, nil
}

// SetPeriodicPaused pauses or resumes the schedule name and returns its
// state afterwards; see store.PeriodicController. A change sets UpdatedAt;
// pausing a paused schedule (or resuming one that is not) changes
// nothing. An unknown name fails with an error wrapping store.ErrNotFound;
// an empty one, or one that is not a storable text, with
// store.ErrInvalidParams.
func (s *Store) SetPeriodicPaused(ctx context.Context, name string, paused bool) (*store.PeriodicState, error) {
	if name == "" {
		return nil, fmt.Errorf("pause periodic schedule: %w: empty name", store.ErrInvalidParams)
	}
	if err := store.CheckText(name, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("pause periodic schedule: %w: name: %w", store.ErrInvalidParams, err)
	}
	var out *store.PeriodicState
	err := s.write(ctx, func(w *wtx) error {
		st, raw, err := w.periodicState(name)
		if err != nil {
			return err
		}
		if st == nil {
			return store.ErrNotFound
		}
		if st.Paused != paused {
			st.Paused, st.UpdatedAt = paused, w.now
			if err := w.putPeriodic(st, raw); err != nil {
				return err
			}
		}
		out, err = withTemplate(st, raw)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pause periodic schedule %q: %w", name, err)
	}
	return out, nil
}
