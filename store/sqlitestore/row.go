package sqlitestore

import (
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// jobRow is a job as read from the jobs table: the record, its rowid, and
// the raw JSON of its errors and follow-up templates, which transitions
// append to or read without decoding. A row read with lightCols has no
// Payload, Metadata or Result.
type jobRow struct {
	seq        int64
	rec        store.JobRecord
	errorsJSON string // JSON array, "" when none
	followUps  string // JSON templates, "" when none
	// kept is the lease token a finish left in the row of a job no longer
	// running (see qSaveEnded), which the record does not show.
	kept uuid.UUID
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanJob reads one row of jobCols or lightCols.
func scanJob(sc scanner) (*jobRow, error) {
	var (
		j                                 jobRow
		id, token, parent, batch          []byte
		payload                           []byte
		metadata, uniqueKey, errs, result sql.NullString
		followUps, seqKey                 sql.NullString
		state                             string
		uGlobal, uFinished, uPeriod       int64
		runAt, scheduledAt, createdAt     int64
		leaseExp, attemptedAt, finishedAt sql.NullInt64
		cancelReq, pauseReq               int64
		snoozedAt                         sql.NullInt64
	)
	r := &j.rec
	err := sc.Scan(&j.seq, &id, &r.Kind, &payload, &metadata, &state, &r.Priority, &runAt, &scheduledAt,
		&r.Attempt, &r.MaxAttempts, &uniqueKey, &uGlobal, &uFinished, &uPeriod, &errs, &token, &leaseExp,
		&r.Owner, &cancelReq, &pauseReq, &r.Fence, &createdAt, &attemptedAt, &finishedAt, &result, &followUps,
		&parent, &batch, &r.PartitionKey, &seqKey, &r.Snoozes, &snoozedAt)
	if err != nil {
		return nil, err
	}
	if r.ID, err = idFrom(id); err != nil {
		return nil, fmt.Errorf("job id: %w", err)
	}
	if r.LeaseToken, err = idFrom(token); err != nil {
		return nil, fmt.Errorf("lease token: %w", err)
	}
	if state != string(store.StateRunning) {
		// A finish keeps the token of the lease that wrote it (qSaveEnded);
		// the record shows it while running only, and save writes it back.
		j.kept, r.LeaseToken = r.LeaseToken, uuid.Nil
	}
	if r.Parent, err = idFrom(parent); err != nil {
		return nil, fmt.Errorf("parent: %w", err)
	}
	if r.Batch, err = idFrom(batch); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	r.Payload = payload
	if metadata.Valid {
		if err := json.Unmarshal([]byte(metadata.String), &r.Metadata); err != nil {
			return nil, fmt.Errorf("job %s metadata: %w", r.ID, err)
		}
	}
	if len(r.Metadata) == 0 {
		r.Metadata = nil
	}
	r.State = store.State(state)
	r.RunAt, r.ScheduledAt, r.CreatedAt = fromUS(runAt), fromUS(scheduledAt), fromUS(createdAt)
	r.LeaseExpiresAt, r.AttemptedAt, r.FinishedAt = fromNullUS(leaseExp), fromNullUS(attemptedAt), fromNullUS(finishedAt)
	r.SnoozedAt = fromNullUS(snoozedAt)
	if uniqueKey.Valid {
		r.UniqueKey = uniqueKey.String
		r.Unique = store.UniqueScope{Global: uGlobal != 0, Finished: uFinished != 0, Period: time.Duration(uPeriod) * time.Second}
	}
	r.CancelRequested, r.PauseRequested = cancelReq != 0, pauseReq != 0
	j.errorsJSON = errs.String
	j.followUps = followUps.String
	r.SequenceKey = seqKey.String
	if result.Valid {
		r.Result = json.RawMessage(result.String)
	}
	return &j, nil
}

// record returns the full record, with its errors and follow-up templates
// decoded.
func (j *jobRow) record() (*store.JobRecord, error) {
	r := j.rec
	if j.errorsJSON != "" {
		if err := json.Unmarshal([]byte(j.errorsJSON), &r.Errors); err != nil {
			return nil, fmt.Errorf("job %s errors: %w", r.ID, err)
		}
	}
	if j.followUps != "" {
		fs, err := decodeFollowUps(j.followUps)
		if err != nil {
			return nil, fmt.Errorf("job %s follow-ups: %w", r.ID, err)
		}
		r.FollowUps = fs
	}
	return &r, nil
}

// appendError appends an error of the row's current attempt, recorded at
// at, to the row's errors: the attempt's number, node (the row's owner)
// and start (its attempted_at).
func (j *jobRow) appendError(at time.Time, text string) error {
	r := &j.rec
	b, err := json.Marshal(store.AttemptError{Attempt: r.Attempt, At: at, Error: text, Node: r.Owner, StartedAt: r.AttemptedAt})
	if err != nil {
		return err
	}
	if j.errorsJSON == "" {
		j.errorsJSON = "[" + string(b) + "]"
	} else {
		j.errorsJSON = j.errorsJSON[:len(j.errorsJSON)-1] + "," + string(b) + "]"
	}
	return nil
}

// leaveRunning clears what only a running job carries: its lease and the
// cancel and pause requests. The owner is kept.
func (j *jobRow) leaveRunning() {
	j.rec.LeaseToken = uuid.Nil
	j.rec.LeaseExpiresAt = time.Time{}
	j.rec.CancelRequested = false
	j.rec.PauseRequested = false
}

// save writes the row's mutable columns (those transitions change).
func (w *wtx) save(j *jobRow) error {
	r := &j.rec
	token := r.LeaseToken
	if r.State != store.StateRunning && token == uuid.Nil {
		token = j.kept
	}
	_, err := w.exec(qSave, string(r.State), toUS(r.RunAt), r.Attempt, r.MaxAttempts, nullText(j.errorsJSON), idArg(token),
		nullUS(r.LeaseExpiresAt), boolInt(r.CancelRequested), boolInt(r.PauseRequested), nullUS(r.FinishedAt),
		r.Snoozes, nullUS(r.SnoozedAt), j.seq)
	return err
}

// ended is a job leaving running whose row saveEnded writes.
type ended struct {
	j      *jobRow
	result json.RawMessage // recorded when not nil
	// token is the lease whose outcome ended the attempt, kept in the row
	// (see qSaveEnded); zero for a rescue, which clears it.
	token uuid.UUID
}

// saveEnded writes, in one statement, the rows of jobs that left running
// (lease and requests cleared): state, run_at, attempt, errors,
// finished_at, result and the snoozes.
func (w *wtx) saveEnded(es []ended) error {
	if len(es) == 0 {
		return nil
	}
	rows := make([][10]any, len(es))
	for i, e := range es {
		r := &e.j.rec
		rows[i] = [10]any{e.j.seq, string(r.State), toUS(r.RunAt), r.Attempt, nullText(e.j.errorsJSON), nullUS(r.FinishedAt), nil, nil,
			r.Snoozes, nullUS(r.SnoozedAt)}
		if e.result != nil {
			rows[i][6] = string(e.result)
		}
		if e.token != uuid.Nil {
			rows[i][7] = hex.EncodeToString(e.token[:])
		}
	}
	list, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	_, err = w.exec(qSaveEnded, string(list))
	return err
}

// loadOne reads at most one job row with q.
func (w *wtx) loadOne(q query, args ...any) (*jobRow, error) {
	j, err := scanJob(w.queryRow(q, args...))
	if isNoRows(err) {
		return nil, nil
	}
	return j, err
}

// loadAll reads the job rows q returns.
func loadAll(rows *sql.Rows, err error) ([]*jobRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*jobRow
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// records reads the full records rows returns.
func records(rows *sql.Rows, err error) ([]*store.JobRecord, error) {
	js, err := loadAll(rows, err)
	if err != nil {
		return nil, err
	}
	out := make([]*store.JobRecord, len(js))
	for i, j := range js {
		if out[i], err = j.record(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// encodeMetadata returns md as a JSON object, NULL when empty.
func encodeMetadata(md map[string]string) (any, error) {
	if len(md) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(md)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// wireParams is store.InsertParams as the store keeps templates (follow-ups,
// batch completions, periodic jobs): the payload travels as a JSON string,
// so that it comes back byte for byte (json.RawMessage would be compacted).
type wireParams struct {
	ID          uuid.UUID         `json:"id,omitzero"`
	Kind        string            `json:"kind"`
	Payload     *string           `json:"payload,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Priority    int               `json:"priority"`
	RunAt       time.Time         `json:"run_at,omitzero"`
	Delay       time.Duration     `json:"delay,omitzero"`
	MaxAttempts int               `json:"max_attempts"`
	UniqueKey   string            `json:"unique_key,omitempty"`
	Unique      store.UniqueScope `json:"unique,omitzero"`
	FollowUps   []wireFollowUp    `json:"follow_ups,omitempty"`
	SequenceKey string            `json:"sequence_key,omitempty"`
}

type wireFollowUp struct {
	On  []store.State `json:"on"`
	Job wireParams    `json:"job"`
}

func toWire(p *store.InsertParams) wireParams {
	w := wireParams{ID: p.ID, Kind: p.Kind, Metadata: p.Metadata, Priority: p.Priority, RunAt: p.RunAt,
		Delay: p.Delay, MaxAttempts: p.MaxAttempts, UniqueKey: p.UniqueKey, Unique: p.Unique, SequenceKey: p.SequenceKey}
	if p.Payload != nil {
		s := string(p.Payload)
		w.Payload = &s
	}
	for _, f := range p.FollowUps {
		w.FollowUps = append(w.FollowUps, wireFollowUp{On: f.On, Job: toWire(&f.Job)})
	}
	return w
}

func (w *wireParams) params() *store.InsertParams {
	p := &store.InsertParams{ID: w.ID, Kind: w.Kind, Metadata: w.Metadata, Priority: w.Priority, RunAt: w.RunAt,
		Delay: w.Delay, MaxAttempts: w.MaxAttempts, UniqueKey: w.UniqueKey, Unique: w.Unique, SequenceKey: w.SequenceKey}
	if w.Payload != nil {
		p.Payload = json.RawMessage(*w.Payload)
	}
	for _, f := range w.FollowUps {
		p.FollowUps = append(p.FollowUps, store.FollowUp{On: f.On, Job: *f.Job.params()})
	}
	return p
}

// encodeParams returns p's template as stored.
func encodeParams(p *store.InsertParams) (string, error) {
	b, err := json.Marshal(toWire(p))
	return string(b), err
}

// decodeParams reads a template written by encodeParams.
func decodeParams(s string) (*store.InsertParams, error) {
	var w wireParams
	if err := json.Unmarshal([]byte(s), &w); err != nil {
		return nil, err
	}
	return w.params(), nil
}

// encodeFollowUps returns fs as stored, NULL when empty.
func encodeFollowUps(fs []store.FollowUp) (any, error) {
	if len(fs) == 0 {
		return nil, nil
	}
	ws := make([]wireFollowUp, len(fs))
	for i := range fs {
		ws[i] = wireFollowUp{On: fs[i].On, Job: toWire(&fs[i].Job)}
	}
	b, err := json.Marshal(ws)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// decodeFollowUps reads what encodeFollowUps wrote.
func decodeFollowUps(s string) ([]store.FollowUp, error) {
	var ws []wireFollowUp
	if err := json.Unmarshal([]byte(s), &ws); err != nil {
		return nil, err
	}
	out := make([]store.FollowUp, len(ws))
	for i := range ws {
		out[i] = store.FollowUp{On: ws[i].On, Job: *ws[i].Job.params()}
	}
	return out, nil
}

// isNoRows reports whether err says a query returned no row.
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
