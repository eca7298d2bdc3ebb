package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.PeriodicController = (*Store)(nil)

// periodicColumns are the columns scanPeriodic reads, in order (paused and
// job_template come from migration 0005).
const periodicColumns = `name, spec, last_tick, updated_at, paused, job_template`

const (
	listPeriodicSQL = `SELECT ` + periodicColumns + ` FROM {periodic}
WHERE last_tick IS NOT NULL ORDER BY name COLLATE "C"`

	// setPeriodicPausedSQL changes the pause, moving updated_at only when
	// it changes; a schedule without a last tick (created by a fire that
	// rolled back, never visible) is unknown, as PeriodicState has it.
	setPeriodicPausedSQL = `UPDATE {periodic} SET
	paused = $2,
	updated_at = CASE WHEN paused = $2 THEN updated_at ELSE now() END
WHERE name = $1 AND last_tick IS NOT NULL
RETURNING ` + periodicColumns
)

// ListPeriodic returns every schedule's state, with its pause and job
// template, ordered by name in byte order; see store.PeriodicController.
func (s *Store) ListPeriodic(ctx context.Context) ([]store.PeriodicState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.periodicSQL(listPeriodicSQL))
	if err != nil {
		return nil, fmt.Errorf("pgstore: list periodic schedules: %w", err)
	}
	defer rows.Close()
	out := []store.PeriodicState{}
	for rows.Next() {
		st, err := scanPeriodic(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list periodic schedules: %w", err)
		}
		out = append(out, *st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: list periodic schedules: %w", err)
	}
	return out, nil
}

// SetPeriodicPaused pauses or resumes the schedule name, in one statement,
// and returns its state afterwards; see store.PeriodicController. A change
// sets UpdatedAt; pausing a paused schedule (or resuming one that is not)
// changes nothing. While paused, FirePeriodic applies ticks without their
// jobs, so a resume starts at the next tick, with no catch-up. An unknown
// name fails with an error wrapping store.ErrNotFound; an empty one, or
// one that is not a storable text of at most store.MaxKindLength bytes,
// with store.ErrInvalidParams.
func (s *Store) SetPeriodicPaused(ctx context.Context, name string, paused bool) (*store.PeriodicState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	verb := "resume"
	if paused {
		verb = "pause"
	}
	if name == "" {
		return nil, fmt.Errorf("pgstore: %s periodic schedule: %w: empty name", verb, store.ErrInvalidParams)
	}
	if err := store.CheckText(name, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("pgstore: %s periodic schedule: %w: name: %w", verb, store.ErrInvalidParams, err)
	}
	st, err := scanPeriodic(s.pool.QueryRow(ctx, s.periodicSQL(setPeriodicPausedSQL), name, paused))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: %s periodic schedule %q: %w", verb, name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s periodic schedule %q: %w", verb, name, invalidData(err))
	}
	return st, nil
}

// scanPeriodic reads one row of periodicColumns.
func scanPeriodic(row pgx.Row) (*store.PeriodicState, error) {
	var (
		st   store.PeriodicState
		tmpl []byte
	)
	if err := row.Scan(&st.Name, &st.Spec, &st.LastTick, &st.UpdatedAt, &st.Paused, &tmpl); err != nil {
		return nil, err
	}
	if tmpl != nil {
		var err error
		if st.Job, err = decodePeriodicTemplate(tmpl); err != nil {
			return nil, fmt.Errorf("decode job template of schedule %q: %w", st.Name, err)
		}
	}
	return &st, nil
}

// templateJSON is store.InsertParams as the periodic table's job_template
// keeps it. The payload travels as a JSON string, so that it comes back
// byte for byte: a json.RawMessage would be compacted by encoding/json,
// and the column is json (which keeps its text) for the same reason.
type templateJSON struct {
	ID           uuid.UUID          `json:"id,omitzero"`
	Kind         string             `json:"kind"`
	Payload      *string            `json:"payload,omitempty"`
	Metadata     map[string]string  `json:"metadata,omitempty"`
	Priority     int                `json:"priority"`
	RunAt        time.Time          `json:"run_at,omitzero"`
	Delay        time.Duration      `json:"delay,omitzero"`
	MaxAttempts  int                `json:"max_attempts"`
	UniqueKey    string             `json:"unique_key,omitempty"`
	Unique       store.UniqueScope  `json:"unique,omitzero"`
	FollowUps    []periodicFollowUp `json:"follow_ups,omitempty"`
	SequenceKey  string             `json:"sequence_key,omitempty"`
	PendingLimit int                `json:"pending_limit,omitempty"`
}

// periodicFollowUp is a follow-up inside a periodic job template.
type periodicFollowUp struct {
	On  []store.State `json:"on"`
	Job templateJSON  `json:"job"`
}

// toTemplate returns p as the periodic table keeps it.
func toTemplate(p *store.InsertParams) templateJSON {
	t := templateJSON{ID: p.ID, Kind: p.Kind, Metadata: p.Metadata, Priority: p.Priority, RunAt: p.RunAt,
		Delay: p.Delay, MaxAttempts: p.MaxAttempts, UniqueKey: p.UniqueKey, Unique: p.Unique,
		SequenceKey: p.SequenceKey, PendingLimit: p.PendingLimit}
	if p.Payload != nil {
		s := string(p.Payload)
		t.Payload = &s
	}
	for _, f := range p.FollowUps {
		t.FollowUps = append(t.FollowUps, periodicFollowUp{On: f.On, Job: toTemplate(&f.Job)})
	}
	return t
}

// params returns the InsertParams t was made from.
func (t *templateJSON) params() *store.InsertParams {
	p := &store.InsertParams{ID: t.ID, Kind: t.Kind, Metadata: t.Metadata, Priority: t.Priority, RunAt: t.RunAt,
		Delay: t.Delay, MaxAttempts: t.MaxAttempts, UniqueKey: t.UniqueKey, Unique: t.Unique,
		SequenceKey: t.SequenceKey, PendingLimit: t.PendingLimit}
	if t.Payload != nil {
		p.Payload = json.RawMessage(*t.Payload)
	}
	for _, f := range t.FollowUps {
		p.FollowUps = append(p.FollowUps, store.FollowUp{On: f.On, Job: *f.Job.params()})
	}
	return p
}

// encodePeriodicTemplate returns the job_template of a declaration's job: the job
// without ID, RunAt, Delay and UniqueKey (each tick's job has its own).
func encodePeriodicTemplate(p *store.InsertParams) (string, error) {
	t := toTemplate(p)
	t.ID, t.RunAt, t.Delay, t.UniqueKey = uuid.Nil, time.Time{}, 0, ""
	b, err := json.Marshal(t)
	return string(b), err
}

// decodePeriodicTemplate reads what encodePeriodicTemplate wrote.
func decodePeriodicTemplate(b []byte) (*store.InsertParams, error) {
	var t templateJSON
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, err
	}
	return t.params(), nil
}
