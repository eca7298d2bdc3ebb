package axhttp

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

//go:embed openapi.json
var openAPIDoc []byte

// apiRoute is one route of the JSON API.
type apiRoute struct {
	pattern string
	handle  http.HandlerFunc
}

// apiRoutes lists the API's routes; openapi.json documents each one.
func (h *Handler) apiRoutes() []apiRoute {
	p := APIPrefix
	return []apiRoute{
		{"GET " + p + "/openapi.json", h.openAPI},
		{"POST " + p + "/jobs", h.submit},
		{"POST " + p + "/jobs/batch", h.submitBatch},
		{"GET " + p + "/jobs", h.listJobs},
		{"GET " + p + "/jobs/count", h.countJobs},
		{"POST " + p + "/jobs/retry", h.bulkJobs(opRetry)},
		{"POST " + p + "/jobs/cancel", h.bulkJobs(opCancel)},
		{"GET " + p + "/jobs/{id}", h.getJob},
		{"GET " + p + "/jobs/{id}/followups", h.followUps},
		{"POST " + p + "/jobs/{id}/retry", h.jobAction(opRetry)},
		{"POST " + p + "/jobs/{id}/cancel", h.jobAction(opCancel)},
		{"GET " + p + "/kinds", h.kinds},
		{"POST " + p + "/kinds/{kind}/pause", h.kindAction(true)},
		{"POST " + p + "/kinds/{kind}/resume", h.kindAction(false)},
		{"GET " + p + "/kinds/{kind}/partitions", h.partitionBreakers},
		{"POST " + p + "/kinds/{kind}/partitions/open", h.partitionBreakerAction(true)},
		{"POST " + p + "/kinds/{kind}/partitions/close", h.partitionBreakerAction(false)},
		{"GET " + p + "/periodic", h.schedules},
		{"POST " + p + "/periodic/{name}/pause", h.scheduleAction(opPause)},
		{"POST " + p + "/periodic/{name}/resume", h.scheduleAction(opResume)},
		{"POST " + p + "/periodic/{name}/trigger", h.scheduleAction(opTrigger)},
		{"GET " + p + "/nodes", h.nodes},
		{"GET " + p + "/stats", h.stats},
	}
}

// notFoundOrMethod answers a request no API route took: 405 with Allow
// when the path exists for other methods, 404 otherwise.
func notFoundOrMethod(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" {
				allow = append(allow, m)
				if m == http.MethodGet {
					allow = append(allow, http.MethodHead)
				}
			}
		}
		if len(allow) == 0 {
			writeProblem(w, r, problem(http.StatusNotFound, ProblemNotFound, "no such route"))
			return
		}
		list := strings.Join(allow, ", ")
		w.Header().Set("Allow", list)
		writeProblem(w, r, problem(http.StatusMethodNotAllowed, ProblemMethod, "this route takes "+list))
	})
}

func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPIDoc)
}

// SubmitRequest is one job to schedule through the API.
type SubmitRequest struct {
	// Kind is the job's kind. Required.
	Kind string `json:"kind"`
	// Payload is the handler's argument, any JSON (null when left out).
	Payload json.RawMessage `json:"payload,omitempty"`
	// UniqueKey is the idempotency key: while a job with it exists (not
	// cancelled), submitting again returns that job, marked duplicate.
	UniqueKey string `json:"unique_key,omitempty"`
	// Priority is high, normal or low (the kind's default when empty).
	Priority string `json:"priority,omitempty"`
	// MaxAttempts caps the attempts (the kind's default when zero).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// RunAt is when the job becomes due; Delay (a Go duration, "90s") is
	// the same counted from now. At most one of them; due now without.
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay makes the job due this long from now: a Go duration ("90s").
	Delay string `json:"delay,omitempty"`
	// Metadata is carried with the job.
	Metadata map[string]string `json:"metadata,omitempty"`
	// CallbackURL, when set, receives the job's end (see Callbacks).
	CallbackURL string `json:"callback_url,omitempty"`
}

// SubmitResponse is what submitting one job did.
type SubmitResponse struct {
	// ID is the job's ID: the new job's, or the existing one's when
	// Duplicate.
	ID uuid.UUID `json:"id"`
	// Duplicate reports that a job with the same unique key existed, so
	// nothing was scheduled.
	Duplicate bool `json:"duplicate"`
	// Job is the job as the store holds it after the call.
	Job *store.JobRecord `json:"job,omitempty"`
}

// MaxSubmitBatch is the most jobs one POST /api/v1/jobs/batch takes.
const MaxSubmitBatch = 1000

// decodeJSON reads r's body as one JSON value into v: the content type
// must be JSON, unknown fields and trailing data are refused, and so are
// texts encoding/json would rewrite to U+FFFD (checkJSONText).
func decodeJSON(r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return problem(http.StatusUnsupportedMediaType, ProblemUnsupportedType, "send the body as application/json")
	}
	body, err := readBody(r)
	if err != nil {
		var p *Problem
		if errors.As(err, &p) {
			return p
		}
		return badRequest("cannot read the body")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("malformed JSON body: %s", jsonErrorText(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("malformed JSON body: data after the first value")
	}
	return checkJSONText(body)
}

// jsonErrorText describes a decoding error without echoing the body.
func jsonErrorText(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q: want %s", typ.Field, typ.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of the body"
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// request turns a SubmitRequest into Schedule's arguments.
func (h *Handler) request(r *http.Request, sr *SubmitRequest) (ax.Request, error) {
	req := ax.Request{Kind: sr.Kind}
	if id, ok := IdentityFrom(r.Context()); ok && h.cfg.Auth != nil {
		if k, known := h.cfg.Auth.keys[id.KeyID]; known && !k.mayCreate(sr.Kind) {
			return req, problem(http.StatusForbidden, ProblemForbidden, fmt.Sprintf("key %s may not schedule jobs of kind %q", id.KeyID, sr.Kind))
		}
	}
	if len(sr.Payload) > 0 {
		if err := checkPayloadDepth(sr.Payload); err != nil {
			return req, err
		}
		req.Payload = sr.Payload
	} else {
		req.Payload = json.RawMessage("null")
	}
	if sr.UniqueKey != "" {
		req.Options = append(req.Options, ax.UniqueKey(sr.UniqueKey))
	}
	if sr.Priority != "" {
		p, err := parsePriority(sr.Priority)
		if err != nil {
			return req, err
		}
		req.Options = append(req.Options, ax.Priority(p))
	}
	if sr.MaxAttempts != 0 {
		req.Options = append(req.Options, ax.MaxAttempts(sr.MaxAttempts))
	}
	switch {
	case !sr.RunAt.IsZero() && sr.Delay != "":
		return req, badRequest("give run_at or delay, not both")
	case !sr.RunAt.IsZero():
		req.Options = append(req.Options, ax.At(sr.RunAt))
	case sr.Delay != "":
		d, err := time.ParseDuration(sr.Delay)
		if err != nil || d < 0 {
			return req, badRequest("delay: want a Go duration (90s, 5m), got %q", sr.Delay)
		}
		req.Options = append(req.Options, ax.In(d))
	}
	if len(sr.Metadata) > 0 {
		req.Options = append(req.Options, ax.Metadata(sr.Metadata))
	}
	if sr.CallbackURL != "" {
		if h.cfg.CallbackPolicy == nil {
			return req, badRequest("callback_url: this server takes no callbacks")
		}
		opt, err := CallbackOption(*h.cfg.CallbackPolicy, sr.CallbackURL)
		if err != nil {
			return req, badRequest("callback_url: %v", err)
		}
		req.Options = append(req.Options, opt)
	}
	return req, nil
}

// scheduler returns the Scheduler that takes submitted jobs, or a 501.
func (h *Handler) scheduler() (*ax.Scheduler, error) {
	if h.cfg.Scheduler == nil {
		return nil, problem(http.StatusNotImplemented, ProblemUnsupported, "this server schedules no jobs")
	}
	return h.cfg.Scheduler, nil
}

// submit schedules one job: 201 with Location for a new job, 200 for a
// duplicate of its unique key.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request) {
	s, err := h.scheduler()
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	var sr SubmitRequest
	if err := decodeJSON(r, &sr); err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	req, err := h.request(r, &sr)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	res, err := s.ScheduleMany(r.Context(), []ax.Request{req})
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	out := SubmitResponse{ID: res[0].ID, Duplicate: res[0].Duplicate}
	if rec, err := h.reader(r).Get(r.Context(), out.ID); err == nil {
		out.Job = rec
	}
	w.Header().Set("Location", basePath(r)+APIPrefix+"/jobs/"+out.ID.String())
	status := http.StatusCreated
	if out.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, out)
}

// BatchRequest is several jobs to schedule at once.
type BatchRequest struct {
	// Jobs are the jobs, 1 to MaxSubmitBatch.
	Jobs []SubmitRequest `json:"jobs"`
}

// BatchResult is what scheduling one job of a batch did.
type BatchResult struct {
	// ID is the job's ID, or the existing one's when Duplicate.
	ID uuid.UUID `json:"id"`
	// Duplicate reports that the job's unique key was held.
	Duplicate bool `json:"duplicate"`
}

// BatchResponse lists a batch's results in the order of its jobs.
type BatchResponse struct {
	// Results holds one result per submitted job.
	Results []BatchResult `json:"results"`
}

// submitBatch schedules up to MaxSubmitBatch jobs in one store call: all
// or none.
func (h *Handler) submitBatch(w http.ResponseWriter, r *http.Request) {
	s, err := h.scheduler()
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	var br BatchRequest
	if err := decodeJSON(r, &br); err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	if len(br.Jobs) == 0 || len(br.Jobs) > MaxSubmitBatch {
		writeProblem(w, r, badRequest("jobs: want 1 to %d jobs, got %d", MaxSubmitBatch, len(br.Jobs)))
		return
	}
	reqs := make([]ax.Request, len(br.Jobs))
	for i := range br.Jobs {
		req, err := h.request(r, &br.Jobs[i])
		if err != nil {
			p := problemFor(r, err)
			p.Detail = fmt.Sprintf("jobs[%d]: %s", i, p.Detail)
			writeProblem(w, r, p)
			return
		}
		reqs[i] = req
	}
	res, err := s.ScheduleMany(r.Context(), reqs)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	out := BatchResponse{Results: make([]BatchResult, len(res))}
	for i, x := range res {
		out.Results[i] = BatchResult{ID: x.ID, Duplicate: x.Duplicate}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkParams(q, listParams); err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	opts, err := parseListOptions(q, h.cfg.Clock())
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	list, err := h.reader(r).List(r.Context(), opts)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	list.Jobs = h.allForCaller(r, list.Jobs)
	writeJSON(w, http.StatusOK, list)
}

// CountResponse is how many jobs a filter selects.
type CountResponse struct {
	// Count is the number of jobs, exactly.
	Count int64 `json:"count"`
}

func (h *Handler) countJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkParams(q, filterParams); err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	f, err := parseFilter(q, h.cfg.Clock())
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	n, err := h.admin.Count(r.Context(), f)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	writeJSON(w, http.StatusOK, CountResponse{Count: n})
}

// jobID reads the {id} of the path, or a 404 (no job has a malformed
// ID).
func jobID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, problem(http.StatusNotFound, ProblemNotFound, "no job has this ID")
	}
	return id, nil
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err == nil {
		var rec *store.JobRecord
		if rec, err = h.reader(r).Get(r.Context(), id); err == nil {
			writeJSON(w, http.StatusOK, h.forCaller(r, rec))
			return
		}
	}
	writeProblem(w, r, problemFor(r, err))
}

// FollowUpsResponse lists the jobs a job's end inserted: its callback
// deliveries (kind CallbackKind) and other follow-ups, oldest first.
type FollowUpsResponse struct {
	// Jobs are the inserted jobs, oldest first unless order=newest, in
	// brief (as GET /api/v1/jobs lists them: Brief holds their previews;
	// GET /api/v1/jobs/{id} shows one whole).
	Jobs []*store.JobRecord `json:"jobs"`
	// Cursor continues the listing (the cursor parameter); empty on the
	// last page.
	Cursor string `json:"cursor,omitempty"`
}

// followUpParams are the parameters of GET /api/v1/jobs/{id}/followups:
// a listing's, its filter being the job.
var followUpParams = []string{"order", "limit", "cursor", "preview"}

// FollowUpsLimit is how many follow-ups GET /api/v1/jobs/{id}/followups
// and the job's page list unless told otherwise (limit, up to
// store.MaxListLimit): a job whose end inserted thousands of large jobs
// answers in pages of bounded bytes.
const FollowUpsLimit = 100

// FollowUpsShown is how many follow-ups a job's page shows, in brief; a
// link lists the rest (/jobs?parent=ID).
const FollowUpsShown = 50

// followUpsOf returns a page of the follow-ups of job id as opts asks
// (its filter is replaced by the job), in brief, or an error wrapping
// errors.ErrUnsupported when the store does not keep them.
func (h *Handler) followUpsOf(r *http.Request, id uuid.UUID, opts ax.ListOptions) (*ax.JobList, error) {
	if _, ok := h.store.(store.FollowUpStore); !ok {
		return nil, fmt.Errorf("follow-ups: store %T does not implement store.FollowUpStore: %w", h.store, errors.ErrUnsupported)
	}
	opts.Filter = ax.JobFilter{Parent: id}
	if opts.Limit == 0 {
		opts.Limit = FollowUpsLimit
	}
	list, err := h.reader(r).List(r.Context(), opts)
	if err != nil {
		return nil, fmt.Errorf("follow-ups of %s: %w", id, err)
	}
	if list.Jobs == nil {
		list.Jobs = []*store.JobRecord{}
	}
	return list, nil
}

func (h *Handler) followUps(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, err := jobID(r)
	if err == nil {
		err = checkParams(q, followUpParams)
	}
	var opts ax.ListOptions
	if err == nil {
		opts, err = parseListOptions(q, h.cfg.Clock())
		if q.Get("order") == "" {
			opts.Order = ax.OldestFirst
		}
	}
	if err == nil {
		if _, err = h.reader(r).Get(r.Context(), id); err == nil {
			var list *ax.JobList
			if list, err = h.followUpsOf(r, id, opts); err == nil {
				writeJSON(w, http.StatusOK, FollowUpsResponse{Jobs: h.allForCaller(r, list.Jobs), Cursor: list.Cursor})
				return
			}
		}
	}
	writeProblem(w, r, problemFor(r, err))
}

type jobOp int

const (
	opRetry jobOp = iota
	opCancel
)

func (h *Handler) apply(r *http.Request, op jobOp, f ax.JobFilter) (int, error) {
	if op == opRetry {
		return h.admin.RetryJobs(r.Context(), f)
	}
	return h.admin.CancelJobs(r.Context(), f)
}

// ChangedResponse says how many jobs a change changed.
type ChangedResponse struct {
	// Changed is the number of jobs changed.
	Changed int `json:"changed"`
}

// bulkJobs retries or cancels the jobs the query's filter selects; a
// filter selecting every job needs all=true.
func (h *Handler) bulkJobs(op jobOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if err := checkParams(q, filterParams, []string{"all"}); err != nil {
			writeProblem(w, r, problemFor(r, err))
			return
		}
		f, err := parseFilter(q, h.cfg.Clock())
		if err != nil {
			writeProblem(w, r, problemFor(r, err))
			return
		}
		if f.IsZero() && q.Get("all") != "true" {
			writeProblem(w, r, badRequest("the filter selects every job: give a filter, or all=true"))
			return
		}
		n, err := h.apply(r, op, f)
		if err != nil {
			writeProblem(w, r, problemFor(r, err))
			return
		}
		writeJSON(w, http.StatusOK, ChangedResponse{Changed: n})
	}
}

// jobAction retries or cancels one job: 404 when it does not exist, 409
// when its state does not allow the change.
func (h *Handler) jobAction(op jobOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec, err := h.changeJob(r, op)
		if err != nil {
			writeProblem(w, r, problemFor(r, err))
			return
		}
		writeJSON(w, http.StatusOK, rec)
	}
}

// changeJob retries or cancels the job of the path and returns it
// afterwards.
func (h *Handler) changeJob(r *http.Request, op jobOp) (*store.JobRecord, error) {
	id, err := jobID(r)
	if err != nil {
		return nil, err
	}
	if _, err := h.reader(r).Get(r.Context(), id); err != nil {
		return nil, err
	}
	n, err := h.apply(r, op, ax.JobFilter{IDs: []uuid.UUID{id}})
	if err != nil {
		return nil, err
	}
	rec, err := h.reader(r).Get(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		verb := "retried"
		if op == opCancel {
			verb = "cancelled"
		}
		return nil, problem(http.StatusConflict, ProblemConflict, fmt.Sprintf("a %s job cannot be %s", rec.State, verb))
	}
	return rec, nil
}

// kindAction pauses or resumes the kind of the path. A pause of a kind
// the cluster does not know is a 404 unless force=true (see
// setKindPaused).
func (h *Handler) kindAction(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		force := false
		err := checkParams(q, []string{"force"})
		if err == nil && pause {
			switch q.Get("force") {
			case "", "false":
			case "true":
				force = true
			default:
				err = badRequest("force: want true or false, got %q", q.Get("force"))
			}
		}
		var ks *ax.KindState
		if err == nil {
			ks, err = h.setKindPaused(r, r.PathValue("kind"), pause, force)
		}
		if err != nil {
			writeProblem(w, r, problemFor(r, err))
			return
		}
		writeJSON(w, http.StatusOK, ks)
	}
}

// setKindPaused pauses or resumes kind. Unless force, a pause of a kind
// the cluster does not know (no jobs, no running node handles it, no
// flow settings, not paused: absent from Admin.Kinds) is a 404 and
// stores nothing: a typo, or "../../jobs" from a path, would otherwise
// store a kind row nobody runs. A resume stores nothing either way (the
// store keeps only pauses).
func (h *Handler) setKindPaused(r *http.Request, kind string, pause, force bool) (*ax.KindState, error) {
	if !pause {
		return h.admin.ResumeKind(r.Context(), kind)
	}
	// An invalid kind is left to PauseKind, to be refused with 400.
	if !force && kind != "" && store.CheckText(kind, store.MaxKindLength) == nil {
		kinds, err := h.admin.Kinds(r.Context())
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(kinds, func(k ax.KindState) bool { return k.Kind == kind }) {
			return nil, problem(http.StatusNotFound, ProblemNotFound,
				fmt.Sprintf("kind %q: no jobs, no running node handles it, not paused (force=true pauses it anyway)", kind))
		}
	}
	return h.admin.PauseKind(r.Context(), kind)
}

func (h *Handler) schedules(w http.ResponseWriter, r *http.Request) {
	ss, err := h.admin.Schedules(r.Context())
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	if ss == nil {
		ss = []ax.Schedule{}
	}
	writeJSON(w, http.StatusOK, ss)
}

type scheduleOp int

const (
	opPause scheduleOp = iota
	opResume
	opTrigger
)

// TriggerResponse names the job a trigger scheduled.
type TriggerResponse struct {
	// ID is the scheduled job's ID or, when Duplicate, the ID of the
	// schedule's previous manual run, which has not ended.
	ID uuid.UUID `json:"id"`
	// Duplicate reports that nothing was scheduled: the schedule's
	// previous manual run has not ended (see ax.Admin.TriggerSchedule).
	Duplicate bool `json:"duplicate"`
}

func (h *Handler) scheduleAction(op scheduleOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := h.changeSchedule(r, r.PathValue("name"), op)
		if err != nil {
			writeProblem(w, r, problemFor(r, err))
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (h *Handler) changeSchedule(r *http.Request, name string, op scheduleOp) (any, error) {
	switch op {
	case opPause:
		return h.admin.PauseSchedule(r.Context(), name)
	case opResume:
		return h.admin.ResumeSchedule(r.Context(), name)
	}
	var opts []ax.TriggerOption
	switch f := r.URL.Query().Get("force"); f {
	case "", "false":
	case "true":
		opts = append(opts, ax.ForceTrigger())
	default:
		return nil, badRequest("force: want true or false, got %q", f)
	}
	res, err := h.admin.TriggerSchedule(r.Context(), name, opts...)
	if err != nil {
		return nil, err
	}
	return TriggerResponse{ID: res.ID, Duplicate: res.Duplicate}, nil
}

// NodesResponse lists the cluster's nodes and the maintenance leader.
type NodesResponse struct {
	// Nodes are the registered nodes, oldest first.
	Nodes []ax.Node `json:"nodes"`
	// Leader is nil when the store cannot tell it.
	Leader *ax.Leader `json:"leader,omitempty"`
}

func (h *Handler) nodesOf(r *http.Request) (*NodesResponse, error) {
	nodes, err := h.admin.Nodes(r.Context())
	if err != nil {
		return nil, err
	}
	if nodes == nil {
		nodes = []ax.Node{}
	}
	out := &NodesResponse{Nodes: nodes}
	switch l, err := h.admin.Leader(r.Context()); {
	case err == nil:
		out.Leader = l
	case !errors.Is(err, errors.ErrUnsupported):
		return nil, err
	}
	return out, nil
}

func (h *Handler) nodes(w http.ResponseWriter, r *http.Request) {
	out, err := h.nodesOf(r)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) statsOf(r *http.Request) (*ax.Stats, error) {
	if h.cfg.Scheduler != nil {
		return h.cfg.Scheduler.Stats(r.Context())
	}
	return h.admin.Stats(r.Context())
}
