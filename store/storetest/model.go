package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// The reference model of RunModel: what a store holds, kept as plainly as
// the contract in package store says it, one transition per documented
// rule. Times the store stamps are not known exactly on a real clock, so
// the model keeps each as a span: the store's clock read just before and
// just after the operation that stamped it.

// span is a time known to lie in [lo, hi]; zero when the time is unset.
type span struct{ lo, hi time.Time }

// at is the span of one known time.
func at(t time.Time) span { return span{t, t} }

func (s span) isZero() bool { return s.lo.IsZero() && s.hi.IsZero() }

// add shifts the span by d.
func (s span) add(d time.Duration) span { return span{s.lo.Add(d), s.hi.Add(d)} }

// spanTolerance absorbs the rounding of stored times (microseconds).
const spanTolerance = time.Millisecond

// holds reports whether t lies in the span, within spanTolerance.
func (s span) holds(t time.Time) bool {
	if s.isZero() {
		return t.IsZero()
	}
	return !t.IsZero() && !t.Before(s.lo.Add(-spanTolerance)) && !t.After(s.hi.Add(spanTolerance))
}

func (s span) String() string {
	if s.isZero() {
		return "zero"
	}
	if s.lo.Equal(s.hi) {
		return s.lo.UTC().Format(time.RFC3339Nano)
	}
	return "[" + s.lo.UTC().Format(time.RFC3339Nano) + ", " + s.hi.UTC().Format(time.RFC3339Nano) + "]"
}

// merr is one expected attempt error: its attempt, and its text (or, for
// a rescue, a text containing "lease expired").
type merr struct {
	attempt int
	at      span
	text    string
	rescue  bool
}

// mjob is the model of one job.
type mjob struct {
	id          uuid.UUID
	kind        string
	payload     []byte
	prio        int
	state       store.State
	runAt       span
	scheduledAt span
	createdAt   span
	attemptedAt span
	finishedAt  span
	leaseExp    span
	snoozes     int  // attempts ended in a snooze
	snoozedAt   span // the last one's
	attempt     int
	maxAttempts int
	fence       int64
	key         string
	scope       store.UniqueScope
	window      int64 // the insert's window of scope.Period
	errs        []merr
	token       uuid.UUID
	owner       string
	shortLease  bool // the lease expires within the run (rescues take it)
	cancelReq   bool
	pauseReq    bool
	result      []byte
	followUps   []store.FollowUp
	parent      uuid.UUID
	batch       uuid.UUID
	deleted     bool // pruned or deleted: Get says ErrNotFound
	// parentChoices are, for a batch's completion job, the children
	// whose ends in one call completed the batch: the store records any
	// one of them as its Parent (store.JobRecord.Parent), and the model
	// learns which (modelRun.settleParents).
	parentChoices []uuid.UUID
}

// uniqueIdent is a unique key in its scope: two jobs with equal idents
// compete for the key (store.UniqueScope).
type uniqueIdent struct {
	kind   string // empty for a global key
	period int64  // seconds
	window int64
	key    string
}

// windowOf is the index of t's window of period (store.UniqueScope.Period).
func windowOf(t time.Time, period time.Duration) int64 {
	if period <= 0 {
		return 0
	}
	return t.Unix() / int64(period/time.Second)
}

func identOf(kind, key string, scope store.UniqueScope, window int64) uniqueIdent {
	id := uniqueIdent{kind: kind, key: key}
	if scope.Global {
		id.kind = ""
	}
	if scope.Period > 0 {
		id.period, id.window = int64(scope.Period/time.Second), window
	}
	return id
}

func (j *mjob) ident() uniqueIdent { return identOf(j.kind, j.key, j.scope, j.window) }

// holdsKey reports whether j holds its unique key in its state: a live job
// does; a succeeded or dead one when its scope keeps finished jobs' keys
// (Finished, or a Period); a cancelled or deleted one never.
func (j *mjob) holdsKey() bool {
	if j.key == "" || j.deleted || j.state == store.StateCancelled {
		return false
	}
	return !j.state.Final() || j.scope.Finished || j.scope.Period > 0
}

// mbatch is the model of one batch.
type mbatch struct {
	id         uuid.UUID
	completion uuid.UUID
	// completionParams is the completion job, inserted when the last
	// pending child ends.
	completionParams store.InsertParams
	children         []uuid.UUID // inserted children (duplicates are not children)
	completed        bool
	// reopened: completed once, then a child was retried; its next
	// completion inserts the completion job under a fresh ID.
	reopened  bool
	createdAt span
}

// recompletion is a completion job inserted again, under a fresh ID the
// model learns from the store: the batch, and the children whose ends in
// one call completed it (its Parent is one of them).
type recompletion struct {
	batch   *mbatch
	choices []uuid.UUID
	now     span
}

// model is the reference model of a whole store.
type model struct {
	jobs    map[uuid.UUID]*mjob
	batches map[uuid.UUID]*mbatch
	// children lists, by parent, the jobs the parent's ends inserted
	// (follow-ups, Then jobs, batch completions), oldest first.
	children map[uuid.UUID][]uuid.UUID
	// tainted keys: a real clock left the window of an insert with the
	// key undecided, so the run stops using them.
	tainted map[string]bool
	// order lists every job in the order the model learned of it, so that
	// random picks depend on the seed, not on IDs.
	order []uuid.UUID
	// unsettled are the completion jobs inserted by the last operation
	// whose Parent the store chose among several children.
	unsettled []*mjob
	// recompleted are the completion jobs the last operation inserted
	// again, to learn (modelRun.learnCompletions).
	recompleted []recompletion
}

func newModel() *model {
	return &model{
		jobs:     map[uuid.UUID]*mjob{},
		batches:  map[uuid.UUID]*mbatch{},
		children: map[uuid.UUID][]uuid.UUID{},
		tainted:  map[string]bool{},
	}
}

// holder returns the job holding id, or nil.
func (m *model) holder(id uniqueIdent) *mjob {
	for _, j := range m.jobs {
		if j.holdsKey() && j.ident() == id {
			return j
		}
	}
	return nil
}

// live returns the jobs not deleted, ordered by ID (the store's listing
// order, oldest first).
func (m *model) live() []*mjob {
	out := make([]*mjob, 0, len(m.jobs))
	for _, j := range m.jobs {
		if !j.deleted {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *mjob) int { return bytes.Compare(a.id[:], b.id[:]) })
	return out
}

// newJob adds a job inserted from p at now (the insert's span) and
// returns it. window is the insert's window of p.Unique.Period.
func (m *model) newJob(p *store.InsertParams, now span, window int64, parent, batch uuid.UUID) *mjob {
	j := &mjob{
		id: p.ID, kind: p.Kind, payload: p.Payload, prio: p.Priority, state: store.StateScheduled,
		createdAt: now, maxAttempts: p.MaxAttempts, key: p.UniqueKey, window: window,
		followUps: p.FollowUps, parent: parent, batch: batch,
	}
	if j.payload == nil {
		j.payload = []byte("null")
	}
	if p.UniqueKey != "" {
		j.scope = p.Unique
	}
	if p.RunAt.IsZero() {
		j.runAt = now.add(p.Delay)
	} else {
		j.runAt = at(p.RunAt.Truncate(time.Microsecond))
	}
	j.scheduledAt = j.runAt
	m.jobs[j.id] = j
	m.order = append(m.order, j.id)
	if parent != uuid.Nil {
		m.children[parent] = append(m.children[parent], j.id)
	}
	return j
}

// leaveRunning clears what only a running job has.
func (j *mjob) leaveRunning() {
	j.token, j.leaseExp, j.shortLease, j.cancelReq, j.pauseReq = uuid.Nil, span{}, false, false, false
}

// ended is a job's entry into a final state whose follow-ups the store
// inserted with IDs of its own: the model learns them from FollowUps.
type ended struct {
	parent    *mjob
	followUps []store.InsertParams
	now       span
}

// finalize records j's end at now: its follow-ups for the state it ended
// in (returned, to be matched with the store's fresh IDs) and its batch's
// progress (the completion job, whose ID is known, when j ended the
// batch's last pending child).
func (m *model) finalize(j *mjob, now span) []ended {
	j.finishedAt = now
	var out []ended
	var fus []store.InsertParams
	for _, f := range j.followUps {
		if slices.Contains(f.On, j.state) {
			p := f.Job
			p.UniqueKey = ""
			fus = append(fus, p)
		}
	}
	if len(fus) > 0 {
		out = append(out, ended{parent: j, followUps: fus, now: now})
	}
	if b := m.batchOf(j); b != nil && !b.completed && m.pending(b) == 0 {
		b.completed = true
		var choices []uuid.UUID
		for _, id := range b.children {
			if k := m.jobs[id]; k.state.Final() && k.finishedAt.lo.Equal(now.lo) && k.finishedAt.hi.Equal(now.hi) {
				choices = append(choices, id)
			}
		}
		if b.reopened {
			m.recompleted = append(m.recompleted, recompletion{batch: b, choices: choices, now: now})
			return out
		}
		c := m.newJob(&b.completionParams, now, 0, j.id, b.id)
		c.parentChoices = choices
		if len(c.parentChoices) > 1 {
			m.unsettled = append(m.unsettled, c)
		}
	}
	return out
}

// reopen records that j, a final job, was taken out of its final state:
// its batch, if completed, reopens.
func (m *model) reopen(j *mjob) {
	if b := m.batchOf(j); b != nil && b.completed {
		b.completed, b.reopened = false, true
	}
}

// batchOf returns the batch j is a child of, or nil (also for a batch's
// completion job).
func (m *model) batchOf(j *mjob) *mbatch {
	if j.batch == uuid.Nil {
		return nil
	}
	b := m.batches[j.batch]
	if b == nil || b.completion == j.id || j.parent != uuid.Nil {
		return nil // completion jobs have a parent, children none
	}
	return b
}

// pending counts b's children that are not final.
func (m *model) pending(b *mbatch) int {
	n := 0
	for _, id := range b.children {
		if !m.jobs[id].state.Final() {
			n++
		}
	}
	return n
}

// batchRecord is the progress the model expects Batch to report.
func (m *model) batchRecord(b *mbatch) store.BatchRecord {
	r := store.BatchRecord{ID: b.id, Total: len(b.children), Completion: b.completion, Completed: b.completed}
	for _, id := range b.children {
		switch m.jobs[id].state {
		case store.StateSucceeded:
			r.Succeeded++
		case store.StateDead:
			r.Dead++
		case store.StateCancelled:
			r.Cancelled++
		default:
			r.Pending++
		}
	}
	return r
}

// diff returns what differs between the model of a job and the store's
// record of it, or "" when they agree.
func (j *mjob) diff(got *store.JobRecord) string {
	var d []string
	chk := func(ok bool, field string, want, have any) {
		if !ok {
			d = append(d, fmt.Sprintf("%s: model %v, store %v", field, want, have))
		}
	}
	chk(got.ID == j.id, "id", j.id, got.ID)
	chk(got.Kind == j.kind, "kind", j.kind, got.Kind)
	chk(got.State == j.state, "state", j.state, got.State)
	chk(got.Priority == j.prio, "priority", j.prio, got.Priority)
	chk(got.Attempt == j.attempt, "attempt", j.attempt, got.Attempt)
	chk(got.MaxAttempts == j.maxAttempts, "max attempts", j.maxAttempts, got.MaxAttempts)
	chk(got.Fence == j.fence, "fence", j.fence, got.Fence)
	chk(got.UniqueKey == j.key, "unique key", j.key, got.UniqueKey)
	chk(got.Unique == j.scope, "unique scope", j.scope, got.Unique)
	chk(got.LeaseToken == j.token, "lease token", j.token, got.LeaseToken)
	chk(got.Owner == j.owner, "owner", j.owner, got.Owner)
	chk(got.CancelRequested == j.cancelReq, "cancel requested", j.cancelReq, got.CancelRequested)
	chk(got.PauseRequested == j.pauseReq, "pause requested", j.pauseReq, got.PauseRequested)
	chk(got.Parent == j.parent, "parent", j.parent, got.Parent)
	chk(got.Batch == j.batch, "batch", j.batch, got.Batch)
	chk(bytes.Equal(got.Payload, j.payload), "payload", string(j.payload), string(got.Payload))
	chk(jsonEqual(got.Result, j.result), "result", string(j.result), string(got.Result))
	chk(len(got.FollowUps) == len(j.followUps), "follow-ups", len(j.followUps), len(got.FollowUps))
	chk(got.Snoozes == j.snoozes, "snoozes", j.snoozes, got.Snoozes)
	for _, tm := range []struct {
		name string
		want span
		got  time.Time
	}{
		{"run_at", j.runAt, got.RunAt},
		{"scheduled_at", j.scheduledAt, got.ScheduledAt},
		{"created_at", j.createdAt, got.CreatedAt},
		{"attempted_at", j.attemptedAt, got.AttemptedAt},
		{"finished_at", j.finishedAt, got.FinishedAt},
		{"lease_expires_at", j.leaseExp, got.LeaseExpiresAt},
		{"snoozed_at", j.snoozedAt, got.SnoozedAt},
	} {
		chk(tm.want.holds(tm.got), tm.name, tm.want, tm.got.UTC().Format(time.RFC3339Nano))
	}
	if len(got.Errors) != len(j.errs) {
		d = append(d, fmt.Sprintf("errors: model %d, store %d (%v)", len(j.errs), len(got.Errors), got.Errors))
	} else {
		for i, e := range j.errs {
			g := got.Errors[i]
			ok := g.Attempt == e.attempt && e.at.holds(g.At)
			if e.rescue {
				ok = ok && strings.Contains(g.Error, "lease expired")
			} else {
				ok = ok && g.Error == e.text
			}
			chk(ok, fmt.Sprintf("error %d", i), fmt.Sprintf("{attempt %d at %s %q}", e.attempt, e.at, e.text), g)
		}
	}
	return strings.Join(d, "; ")
}

// jsonEqual reports whether a and b are the same JSON value (a database
// may store results normalized), nil and empty being equal.
func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// setParent makes parent the parent of j, in the listing of follow-ups
// too.
func (m *model) setParent(j *mjob, parent uuid.UUID) {
	kids := m.children[j.parent]
	if i := slices.Index(kids, j.id); i >= 0 {
		m.children[j.parent] = slices.Delete(kids, i, i+1)
	}
	j.parent = parent
	m.children[parent] = append(m.children[parent], j.id)
}
