package axtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

var nopLogger = zap.NewNop()

// Match is a condition on a scheduled job: Payload, Priority, MaxAttempts,
// UniqueKey, Metadata, RunAt, RunAtWithin, State.
type Match struct {
	desc  string
	ok    func(*ax.JobRecord) bool
	state ax.State // set by State: the match picks the states to look in
}

// Payload matches a job whose payload is JSON-equal to v encoded (key
// order and spacing do not matter). v may be a JobArgs value:
// Payload(EmailArgs{To: "ada@example.com"}).
func Payload(v any) Match {
	want, err := json.Marshal(v)
	return Match{desc: fmt.Sprintf("payload %s", want), ok: func(j *ax.JobRecord) bool {
		return err == nil && jsonEqual(want, j.Payload)
	}}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Priority matches a job of priority p.
func Priority(p ax.PriorityLevel) Match {
	return Match{desc: "priority " + p.String(), ok: func(j *ax.JobRecord) bool { return j.Priority == int(p) }}
}

// MaxAttempts matches a job with n attempts.
func MaxAttempts(n int) Match {
	return Match{desc: fmt.Sprintf("max attempts %d", n), ok: func(j *ax.JobRecord) bool { return j.MaxAttempts == n }}
}

// UniqueKey matches a job with unique key k.
func UniqueKey(k string) Match {
	return Match{desc: fmt.Sprintf("unique key %q", k), ok: func(j *ax.JobRecord) bool { return j.UniqueKey == k }}
}

// Metadata matches a job whose metadata holds key with value.
func Metadata(key, value string) Match {
	return Match{desc: fmt.Sprintf("metadata %s=%s", key, value), ok: func(j *ax.JobRecord) bool {
		v, ok := j.Metadata[key]
		return ok && v == value
	}}
}

// RunAt matches a job due at t exactly (to the microsecond, the stores'
// precision).
func RunAt(t time.Time) Match {
	return Match{desc: "run at " + t.UTC().Format(time.RFC3339Nano), ok: func(j *ax.JobRecord) bool {
		return j.RunAt.Truncate(time.Microsecond).Equal(t.Truncate(time.Microsecond))
	}}
}

// RunAtWithin matches a job due within tolerance of t.
func RunAtWithin(t time.Time, tolerance time.Duration) Match {
	return Match{desc: fmt.Sprintf("run at %s ± %s", t.UTC().Format(time.RFC3339Nano), tolerance), ok: func(j *ax.JobRecord) bool {
		d := j.RunAt.Sub(t)
		return d >= -tolerance && d <= tolerance
	}}
}

// State matches a job in state st. Without it, the Require functions
// consider the jobs waiting to run: scheduled, retrying and paused.
func State(st ax.State) Match {
	return Match{desc: "state " + string(st), ok: func(j *ax.JobRecord) bool { return j.State == st }, state: st}
}

// waiting are the states a job "is scheduled" in.
var waiting = []ax.State{ax.StateScheduled, ax.StateRetrying, ax.StatePaused}

// ScheduledJob is a job RequireScheduled found: its record as the store
// keeps it (payload and result opened when the Scheduler has the keys of
// Config.Keys) and its payload decoded into A.
type ScheduledJob[A ax.JobArgs] struct {
	*ax.JobRecord

	// Args is the job's payload decoded from JSON into an A, as
	// ax.HandleArgs decodes it for the handler.
	Args A
}

// RequireScheduled fails the test unless s's store holds a job of A's
// kind (A's zero value's Kind()) that matches every m, by default among
// the jobs waiting to run (scheduled, retrying, paused; State picks
// others), and returns the oldest such job, with its payload decoded into
// an A. It fails too when that payload does not decode into an A. The
// failure lists the jobs of the kind there are. It is the typed form of
// RequireScheduledKind, as rivertest.RequireInserted is River's.
func RequireScheduled[A ax.JobArgs](t testing.TB, s *ax.Scheduler, m ...Match) *ScheduledJob[A] {
	t.Helper()
	kind := kindOf[A](t)
	j := requireScheduled(t, s, kind, m)
	var args A
	if err := json.Unmarshal(j.Payload, &args); err != nil {
		t.Fatalf("axtest: %q job %s: decode payload %s into %T: %v", kind, j.ID, j.Payload, args, err)
	}
	return &ScheduledJob[A]{JobRecord: j, Args: args}
}

// RequireNotScheduled fails the test if s's store holds a job of A's kind
// that matches every m (by default among the jobs waiting to run).
func RequireNotScheduled[A ax.JobArgs](t testing.TB, s *ax.Scheduler, m ...Match) {
	t.Helper()
	requireNotScheduled(t, s, kindOf[A](t), m)
}

// RequireScheduledKind is RequireScheduled for a job kind given as a
// string, for payloads that are not JobArgs: it returns the record of the
// oldest job of kind matching every m, and leaves its payload undecoded.
func RequireScheduledKind(t testing.TB, s *ax.Scheduler, kind string, m ...Match) *ax.JobRecord {
	t.Helper()
	return requireScheduled(t, s, kind, m)
}

// RequireNotScheduledKind is RequireNotScheduled for a job kind given as a
// string.
func RequireNotScheduledKind(t testing.TB, s *ax.Scheduler, kind string, m ...Match) {
	t.Helper()
	requireNotScheduled(t, s, kind, m)
}

// Expect is one expected job of RequireManyScheduled: a job of Kind that
// matches every Match. ExpectArgs makes one for a JobArgs type.
type Expect struct {
	Kind  string
	Match []Match

	err error // from ExpectArgs: the args type cannot tell its kind
}

// ExpectArgs returns the Expect of a job of A's kind that matches every m.
func ExpectArgs[A ax.JobArgs](m ...Match) Expect {
	kind, err := argsKind[A]()
	return Expect{Kind: kind, Match: m, err: err}
}

// RequireManyScheduled fails the test unless the jobs waiting to run of the
// kinds named in want are, in the order they were scheduled, exactly as
// many as want and each matches its Expect. It returns them.
func RequireManyScheduled(t testing.TB, s *ax.Scheduler, want ...Expect) []*ax.JobRecord {
	t.Helper()
	var kinds []string
	for _, w := range want {
		if w.err != nil {
			t.Fatalf("axtest: %v", w.err)
		}
		if !slices.Contains(kinds, w.Kind) {
			kinds = append(kinds, w.Kind)
		}
	}
	jobs := listJobs(t, s, kinds, waiting)
	if len(jobs) != len(want) {
		t.Fatalf("axtest: %d jobs scheduled, want %d:\n%s", len(jobs), len(want), summary(jobs))
	}
	for i, w := range want {
		if jobs[i].Kind != w.Kind || !matches(jobs[i], w.Match) {
			t.Fatalf("axtest: job %d is %s, want a %q job matching %s; the jobs are:\n%s",
				i, jobs[i].Kind, w.Kind, describe(w.Match), summary(jobs))
		}
	}
	return jobs
}

func requireScheduled(t testing.TB, s *ax.Scheduler, kind string, m []Match) *ax.JobRecord {
	t.Helper()
	jobs := listJobs(t, s, []string{kind}, statesOf(m))
	for _, j := range jobs {
		if matches(j, m) {
			return j
		}
	}
	t.Fatalf("axtest: no %q job matching %s; the %q jobs are:\n%s", kind, describe(m), kind, summary(jobs))
	return nil
}

func requireNotScheduled(t testing.TB, s *ax.Scheduler, kind string, m []Match) {
	t.Helper()
	for _, j := range listJobs(t, s, []string{kind}, statesOf(m)) {
		if matches(j, m) {
			t.Fatalf("axtest: a %q job matching %s is scheduled:\n%s", kind, describe(m), summary([]*ax.JobRecord{j}))
		}
	}
}

// kindOf returns A's kind, failing the test when A's zero value cannot
// tell it.
func kindOf[A ax.JobArgs](t testing.TB) string {
	t.Helper()
	kind, err := argsKind[A]()
	if err != nil {
		t.Fatalf("axtest: %v", err)
	}
	return kind
}

// argsKind returns A's kind from its zero value, as ax.HandleArgs does.
func argsKind[A ax.JobArgs]() (kind string, err error) {
	defer func() {
		if recover() != nil {
			var a A
			err = fmt.Errorf("%s.Kind() panics on the zero value; give it a value receiver", reflect.TypeOf(&a).Elem())
		}
	}()
	var a A
	return a.Kind(), nil
}

// listJobs lists the jobs of kinds in s's store, oldest first, in the
// given states (all states when none): through the Scheduler's Admin,
// which opens sealed payloads, or, on a store without
// store.JobInspector, its store.Lister.
func listJobs(t testing.TB, s *ax.Scheduler, kinds []string, states []ax.State) []*ax.JobRecord {
	t.Helper()
	ctx := context.Background()
	opts := ax.ListOptions{Filter: ax.JobFilter{Kinds: kinds, States: states}, Order: ax.OldestFirst, Limit: store.MaxListLimit}
	var out []*ax.JobRecord
	for {
		page, err := s.Admin().List(ctx, opts)
		if errors.Is(err, errors.ErrUnsupported) {
			return listStore(t, s, kinds, states)
		}
		if err != nil {
			t.Fatalf("axtest: list %q jobs: %v", kinds, err)
		}
		out = append(out, page.Jobs...)
		if page.Cursor == "" {
			return out
		}
		opts.Cursor = page.Cursor
	}
}

// listStore is listJobs on a store.Lister.
func listStore(t testing.TB, s *ax.Scheduler, kinds []string, states []ax.State) []*ax.JobRecord {
	t.Helper()
	l, ok := s.Store().(store.Lister)
	if !ok {
		t.Fatalf("axtest: store %T cannot list jobs (neither store.JobInspector nor store.Lister)", s.Store())
	}
	var out []*ax.JobRecord
	for _, kind := range kinds {
		p := &store.ListParams{Kind: kind, States: states, Limit: 1000}
		for {
			page, err := l.List(context.Background(), p)
			if err != nil {
				t.Fatalf("axtest: list %q jobs: %v", kind, err)
			}
			out = append(out, page...)
			if len(page) < p.Limit {
				break
			}
			p.After = page[len(page)-1].ID
		}
	}
	slices.SortFunc(out, func(a, b *ax.JobRecord) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return out
}

// statesOf returns the states a set of matches asks for: those of State
// matches, or the waiting states.
func statesOf(ms []Match) []ax.State {
	for _, m := range ms {
		if m.state != "" {
			return nil // the State matches do the filtering
		}
	}
	return waiting
}

func matches(j *ax.JobRecord, ms []Match) bool {
	for _, m := range ms {
		if !m.ok(j) {
			return false
		}
	}
	return true
}

func describe(ms []Match) string {
	if len(ms) == 0 {
		return "any"
	}
	ds := make([]string, len(ms))
	for i, m := range ms {
		ds[i] = m.desc
	}
	return strings.Join(ds, ", ")
}

func summary(jobs []*ax.JobRecord) string {
	if len(jobs) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for _, j := range jobs {
		fmt.Fprintf(&b, "  %s %s %s payload=%s priority=%d run_at=%s unique_key=%q metadata=%v\n",
			j.ID, j.Kind, j.State, j.Payload, j.Priority, j.RunAt.UTC().Format(time.RFC3339Nano), j.UniqueKey, j.Metadata)
	}
	return b.String()
}
