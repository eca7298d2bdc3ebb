package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Compile-time checks of the follow-up abilities (followup.go, batch.go).
var (
	_ store.FollowUpStore = (*Store)(nil)
	_ store.BatchStore    = (*Store)(nil)
)

// followUpColumns are the columns of migration 0006 that every job read
// returns after jobColumns: result, follow-up templates, parent and batch.
const followUpColumns = `result, follow_ups, parent, batch_id`

// jobExtra holds followUpColumns while scanning a row.
type jobExtra struct {
	result    []byte // raw bytes: the json column's text, byte for byte
	followUps []byte
	parent    *[16]byte // IDs as [16]byte: uuidargs.go
	batch     *[16]byte
}

func (x *jobExtra) dest() []any {
	return []any{&x.result, &x.followUps, &x.parent, &x.batch}
}

// apply copies the scanned columns into j.
func (x *jobExtra) apply(j *store.JobRecord) error {
	if x.result != nil {
		j.Result = json.RawMessage(x.result)
	}
	if x.parent != nil {
		j.Parent = *x.parent
	}
	if x.batch != nil {
		j.Batch = *x.batch
	}
	if len(x.followUps) > 0 {
		fs, err := decodeFollowUps(x.followUps)
		if err != nil {
			return fmt.Errorf("decode follow-ups of job %s: %w", j.ID, err)
		}
		j.FollowUps = fs
	}
	return nil
}

// template is store.InsertParams as the store keeps a job to insert later
// (follow-ups, batch completions) and as ax_insert_template reads it. The
// payload travels as a JSON string holding its exact text, since a
// json.RawMessage would be re-encoded (compacted) on the way in; for the
// same reason follow-ups are templates too. The ID is left out: each
// insert gets its own.
type template struct {
	store.InsertParams
	Payload   string             `json:"payload"`
	FollowUps []followUpTemplate `json:"follow_ups,omitempty"`
}

// followUpTemplate is store.FollowUp as the follow_ups column keeps it.
type followUpTemplate struct {
	On  []store.State `json:"on"`
	Job template      `json:"job"`
}

// newTemplate returns p as a template.
func newTemplate(p *store.InsertParams) template {
	t := template{InsertParams: *p, Payload: string(payloadJSON(p.Payload))}
	t.ID, t.InsertParams.Payload, t.InsertParams.FollowUps = uuid.Nil, nil, nil
	for _, f := range p.FollowUps {
		t.FollowUps = append(t.FollowUps, followUpTemplate{On: f.On, Job: newTemplate(&f.Job)})
	}
	return t
}

// params returns the InsertParams t was made from (without ID).
func (t *template) params() store.InsertParams {
	p := t.InsertParams
	p.Payload = json.RawMessage(t.Payload)
	p.FollowUps = nil
	for _, f := range t.FollowUps {
		p.FollowUps = append(p.FollowUps, store.FollowUp{On: f.On, Job: f.Job.params()})
	}
	return p
}

// encodeTemplate returns p's template as JSON.
func encodeTemplate(p *store.InsertParams) ([]byte, error) {
	b, err := json.Marshal(newTemplate(p))
	if err != nil {
		return nil, fmt.Errorf("encode job template: %w", err)
	}
	return b, nil
}

// encodeFollowUps returns the follow_ups column of a job with fs, or nil
// when fs is empty.
func encodeFollowUps(fs []store.FollowUp) ([]byte, error) {
	if len(fs) == 0 {
		return nil, nil
	}
	out := make([]followUpTemplate, len(fs))
	for i := range fs {
		out[i] = followUpTemplate{On: fs[i].On, Job: newTemplate(&fs[i].Job)}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode follow-ups: %w", err)
	}
	return b, nil
}

// decodeFollowUps reads a follow_ups column.
func decodeFollowUps(b []byte) ([]store.FollowUp, error) {
	var ts []followUpTemplate
	if err := json.Unmarshal(b, &ts); err != nil {
		return nil, err
	}
	out := make([]store.FollowUp, len(ts))
	for i, t := range ts {
		out[i] = store.FollowUp{On: t.On, Job: t.Job.params()}
	}
	return out, nil
}

// sql returns q with the names of this Store's schema substituted: {jobs},
// {history}, {alljobs}, {batches} and {schema} (for functions), and {cols} for jobColumns with
// followUpColumns. Names come from the validated schema name through
// pgx.Identifier.Sanitize.
func (s *Store) sql(q string) string {
	return strings.NewReplacer(append([]string{
		"{jobs}", pgx.Identifier{s.schema, "jobs"}.Sanitize(),
		"{history}", s.historyTable(),
		"{alljobs}", s.allJobsTable(),
		"{batches}", pgx.Identifier{s.schema, "batches"}.Sanitize(),
		"{schema}", pgx.Identifier{s.schema}.Sanitize(),
		"{cols}", jobColumns,
	}, s.place.pairs()...)...).Replace(q)
}

// FollowUps returns the jobs whose Parent is id — its follow-ups, its Then
// jobs and a batch completion its end inserted — oldest first (by creation
// time, then ID). An unknown job has none.
func (s *Store) FollowUps(ctx context.Context, id uuid.UUID) ([]*store.JobRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, s.sql(`SELECT {cols} FROM {alljobs} WHERE parent = $1 ORDER BY created_at, id`), [16]byte(id))
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: follow-ups of job %s: %w", id, err)
	}
	return jobs, nil
}
