package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.PeriodicStore = (*Store)(nil)

// periodicSQL returns query with {periodic} replaced by the schema's
// periodic table (created by migration 0001).
func (s *Store) periodicSQL(query string) string {
	return strings.ReplaceAll(query, "{periodic}", pgx.Identifier{s.schema, "periodic"}.Sanitize())
}

// DeclarePeriodic implements store.PeriodicStore in one statement: an
// unknown name is inserted with last_tick = now() (a microsecond later on
// a whole second: store.DeclarationTick); a known one gets spec
// recorded (updated_at moves only when the spec changes) and keeps its
// last tick and pause. params.Job, when not nil, is recorded as the
// schedule's job template (without ID, RunAt, Delay and UniqueKey, payload
// byte for byte); a nil one keeps the template recorded before. A name or
// spec PostgreSQL refuses as text fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) DeclarePeriodic(ctx context.Context, params *store.DeclarePeriodicParams) (*store.PeriodicDeclaration, error) {
	if params == nil {
		return nil, fmt.Errorf("pgstore: declare periodic schedule: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: declare periodic schedule: %w", err)
	}
	name, spec := params.Name, params.Spec
	if err := s.check(); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("pgstore: declare periodic schedule: %w: empty name", store.ErrInvalidParams)
	}
	var tmpl *string
	if params.Job != nil {
		enc, err := encodePeriodicTemplate(params.Job)
		if err != nil {
			return nil, fmt.Errorf("pgstore: declare periodic schedule %q: %w: job template: %w", name, store.ErrInvalidParams, err)
		}
		tmpl = &enc
	}
	// prev reads the row as of the statement's snapshot, for the previous
	// spec; xmax = 0 tells a fresh insert from an update.
	const q = `WITH prev AS (SELECT spec FROM {periodic} WHERE name = $1)
INSERT INTO {periodic} AS p (name, spec, last_tick, updated_at, job_template) VALUES ($1, $2, ` + declarationTickSQL + `, now(), $3::json)
ON CONFLICT (name) DO UPDATE SET
	spec = EXCLUDED.spec,
	last_tick = coalesce(p.last_tick, ` + declarationTickSQL + `),
	updated_at = CASE WHEN p.spec = EXCLUDED.spec THEN p.updated_at ELSE now() END,
	job_template = coalesce(EXCLUDED.job_template, p.job_template)
RETURNING p.spec, p.last_tick, p.updated_at, coalesce((SELECT spec FROM prev), ''), p.xmax = 0, now(),
	p.paused, p.job_template`
	d := &store.PeriodicDeclaration{State: store.PeriodicState{Name: name}}
	var stored []byte
	err := s.pool.QueryRow(ctx, s.periodicSQL(q), name, spec, tmpl).Scan(
		&d.State.Spec, &d.State.LastTick, &d.State.UpdatedAt, &d.PreviousSpec, &d.Created, &d.Now,
		&d.State.Paused, &stored)
	if err != nil {
		return nil, fmt.Errorf("pgstore: declare periodic schedule %q: %w", name, invalidData(err))
	}
	if stored != nil {
		if d.State.Job, err = decodePeriodicTemplate(stored); err != nil {
			return nil, fmt.Errorf("pgstore: declare periodic schedule %q: decode job template: %w", name, err)
		}
	}
	if d.Created {
		d.PreviousSpec = ""
	}
	return d, nil
}

// declarationTickSQL is store.DeclarationTick(now()).
const declarationTickSQL = `(CASE WHEN date_trunc('second', now()) = now() THEN now() + interval '1 microsecond' ELSE now() END)`

// FirePeriodic implements store.PeriodicStore in one transaction: it locks
// the schedule's row (creating it if missing), keeps the ticks after its
// last_tick and not after now(), advances last_tick to the latest of them
// and inserts their jobs as Insert does (listeners are notified at
// commit; each job's ScheduledAt is its RunAt, the tick). Racing hosts
// queue on the row lock, and each sees the last_tick the previous one
// committed. Invalid params, or data PostgreSQL refuses, fail with an error
// wrapping store.ErrInvalidParams and change nothing.
func (s *Store) FirePeriodic(ctx context.Context, params *store.FirePeriodicParams) (*store.FirePeriodicResult, error) {
	return s.fireIn(ctx, params, nil, s.insertTicks)
}

// fireIn is FirePeriodic, its transaction begun by begin (when not nil)
// and the ticks' jobs inserted by insert: the Citus store's way too.
func (s *Store) fireIn(ctx context.Context, params *store.FirePeriodicParams, begin func(context.Context, pgx.Tx) error,
	insert tickInserter) (*store.FirePeriodicResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	// Validate checks each tick's job with InsertParams.Validate too.
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: fire periodic schedule %q: %w", params.Name, err)
	}
	var res *store.FirePeriodicResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if begin != nil {
			if err := begin(ctx, tx); err != nil {
				return err
			}
		}
		var err error
		res, err = s.firePeriodic(ctx, tx, params, insert)
		return err
	})
	if errors.Is(err, errNothingApplied) {
		return res, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: fire periodic schedule %q: %w", params.Name, invalidData(err))
	}
	return res, nil
}

// errNothingApplied rolls back a fire that applied no tick.
var errNothingApplied = errors.New("pgstore: no tick applied")

// tickInserter inserts the jobs of a fire's ticks in its transaction:
// Store.insertTicks, or the Citus store's insert.
type tickInserter func(ctx context.Context, tx pgx.Tx, jobs []store.InsertParams) ([]store.InsertResult, error)

// firePeriodic is FirePeriodic's transaction, the ticks' jobs inserted by
// insert.
func (s *Store) firePeriodic(ctx context.Context, tx pgx.Tx, params *store.FirePeriodicParams, insert tickInserter) (*store.FirePeriodicResult, error) {
	const (
		lock   = `SELECT last_tick, now(), paused FROM {periodic} WHERE name = $1 FOR UPDATE`
		create = `INSERT INTO {periodic} (name, spec) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`
		update = `UPDATE {periodic} SET spec = $2, last_tick = $3, updated_at = now() WHERE name = $1`
	)
	var (
		last   *time.Time
		now    time.Time
		paused bool
	)
	err := tx.QueryRow(ctx, s.periodicSQL(lock), params.Name).Scan(&last, &now, &paused)
	if errors.Is(err, pgx.ErrNoRows) {
		// First fire of an undeclared schedule. A racing creator makes
		// the insert a no-op after waiting for it; either way the row
		// exists for the lock (and vanishes on rollback if nothing fires).
		if _, err = tx.Exec(ctx, s.periodicSQL(create), params.Name, params.Spec); err != nil {
			return nil, err
		}
		err = tx.QueryRow(ctx, s.periodicSQL(lock), params.Name).Scan(&last, &now, &paused)
	}
	if err != nil {
		return nil, err
	}
	res := &store.FirePeriodicResult{
		Applied: make([]bool, len(params.Ticks)),
		Jobs:    make([]store.InsertResult, len(params.Ticks)),
		Now:     now,
	}
	if last != nil {
		res.LastTick = *last
	}
	var (
		jobs    []store.InsertParams
		jobOf   []int // tick index of each job
		latest  time.Time
		applied bool
	)
	for i, tk := range params.Ticks {
		at := tk.At.Truncate(time.Microsecond)
		if (last != nil && !at.After(*last)) || at.After(now) {
			continue
		}
		res.Applied[i], latest, applied = true, at, true
		if tk.Job != nil && !paused { // a paused schedule's ticks pass without jobs
			jobs = append(jobs, *tk.Job)
			jobOf = append(jobOf, i)
		}
	}
	if !applied {
		return res, errNothingApplied
	}
	if _, err := tx.Exec(ctx, s.periodicSQL(update), params.Name, params.Spec, latest); err != nil {
		return nil, err
	}
	if len(jobs) > 0 {
		inserted, err := insert(ctx, tx, jobs)
		if err != nil {
			return nil, err
		}
		for k, r := range inserted {
			res.Jobs[jobOf[k]] = r
		}
	}
	res.LastTick = latest
	return res, nil
}

// PeriodicState implements store.PeriodicStore, with the schedule's pause
// and job template. A name PostgreSQL refuses as text fails with an error
// wrapping store.ErrInvalidParams.
func (s *Store) PeriodicState(ctx context.Context, name string) (*store.PeriodicState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	const q = `SELECT ` + periodicColumns + ` FROM {periodic} WHERE name = $1 AND last_tick IS NOT NULL`
	st, err := scanPeriodic(s.pool.QueryRow(ctx, s.periodicSQL(q), name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: periodic schedule %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: periodic schedule %q: %w", name, invalidData(err))
	}
	return st, nil
}
