package axtest

import (
	"bytes"
	"context"
	"encoding/json"
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
	ok    func(*store.JobRecord) bool
	state store.State // set by State: the match picks the states to look in
}

// Payload matches a job whose payload is JSON-equal to v encoded (key
// order and spacing do not matter).
func Payload(v any) Match {
	want, err := json.Marshal(v)
	return Match{desc: fmt.Sprintf("payload %s", want), ok: func(j *store.JobRecord) bool {
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
	return Match{desc: "priority " + p.String(), ok: func(j *store.JobRecord) bool { return j.Priority == int(p) }}
}

// MaxAttempts matches a job with n attempts.
func MaxAttempts(n int) Match {
	return Match{desc: fmt.Sprintf("max attempts %d", n), ok: func(j *store.JobRecord) bool { return j.MaxAttempts == n }}
}

// UniqueKey matches a job with unique key k.
func UniqueKey(k string) Match {
	return Match{desc: fmt.Sprintf("unique key %q", k), ok: func(j *store.JobRecord) bool { return j.UniqueKey == k }}
}

// Metadata matches a job whose metadata holds key with value.
func Metadata(key, value string) Match {
	return Match{desc: fmt.Sprintf("metadata %s=%s", key, value), ok: func(j *store.JobRecord) bool {
		v, ok := j.Metadata[key]
		return ok && v == value
	}}
}

// RunAt matches a job due at t exactly (to the microsecond, the stores'
// precision).
func RunAt(t time.Time) Match {
	return Match{desc: "run at " + t.UTC().Format(time.RFC3339Nano), ok: func(j *store.JobRecord) bool {
		return j.RunAt.Truncate(time.Microsecond).Equal(t.Truncate(time.Microsecond))
	}}
}

// RunAtWithin matches a job due within tolerance of t.
func RunAtWithin(t time.Time, tolerance time.Duration) Match {
	return Match{desc: fmt.Sprintf("run at %s ± %s", t.UTC().Format(time.RFC3339Nano), tolerance), ok: func(j *store.JobRecord) bool {
		d := j.RunAt.Sub(t)
		return d >= -tolerance && d <= tolerance
	}}
}

// State matches a job in state st. Without it, the Require functions
// consider the jobs waiting to run: scheduled, retrying and paused.
func State(st ax.State) Match {
	return Match{desc: "state " + string(st), ok: func(j *store.JobRecord) bool { return j.State == st }, state: st}
}

// waiting are the states a job "is scheduled" in.
var waiting = []store.State{store.StateScheduled, store.StateRetrying, store.StatePaused}

// jobsOf lists the jobs of kind in s's store, oldest first, in the given
// states (all states when none).
func jobsOf(t testing.TB, s *ax.Scheduler, kind string, states []store.State) []*store.JobRecord {
	t.Helper()
	l, ok := s.Store().(store.Lister)
	if !ok {
		t.Fatalf("axtest: store %T cannot list jobs", s.Store())
	}
	var out []*store.JobRecord
	p := &store.ListParams{Kind: kind, States: states, Limit: 1000}
	for {
		page, err := l.List(context.Background(), p)
		if err != nil {
			t.Fatalf("axtest: list %q jobs: %v", kind, err)
		}
		out = append(out, page...)
		if len(page) < p.Limit {
			return out
		}
		p.After = page[len(page)-1].ID
	}
}

// statesOf returns the states a set of matches asks for: those of State
// matches, or the waiting states.
func statesOf(ms []Match) []store.State {
	for _, m := range ms {
		if m.state != "" {
			return nil // the State matches do the filtering
		}
	}
	return waiting
}

func matches(j *store.JobRecord, ms []Match) bool {
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

func summary(jobs []*store.JobRecord) string {
	if len(jobs) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for _, j := range jobs {
		fmt.Fprintf(&b, "  %s %s payload=%s priority=%d run_at=%s unique_key=%q metadata=%v\n",
			j.ID, j.State, j.Payload, j.Priority, j.RunAt.UTC().Format(time.RFC3339Nano), j.UniqueKey, j.Metadata)
	}
	return b.String()
}

// RequireScheduled fails the test unless s's store holds a job of kind
// that matches every m (by default among the jobs waiting to run:
// scheduled, retrying, paused), and returns the first such job.
func RequireScheduled(t testing.TB, s *ax.Scheduler, kind string, m ...Match) *store.JobRecord {
	t.Helper()
	jobs := jobsOf(t, s, kind, statesOf(m))
	for _, j := range jobs {
		if matches(j, m) {
			return j
		}
	}
	t.Fatalf("axtest: no %q job matching %s; the %q jobs are:\n%s", kind, describe(m), kind, summary(jobs))
	return nil
}

// RequireNotScheduled fails the test if s's store holds a job of kind that
// matches every m (by default among the jobs waiting to run).
func RequireNotScheduled(t testing.TB, s *ax.Scheduler, kind string, m ...Match) {
	t.Helper()
	for _, j := range jobsOf(t, s, kind, statesOf(m)) {
		if matches(j, m) {
			t.Fatalf("axtest: a %q job matching %s is scheduled:\n%s", kind, describe(m), summary([]*store.JobRecord{j}))
		}
	}
}

// Expect is one expected job of RequireManyScheduled.
type Expect struct {
	Kind  string
	Match []Match
}

// RequireManyScheduled fails the test unless the jobs waiting to run of the
// kinds named in want are, in the order they were scheduled, exactly as
// many as want and each matches its Expect. It returns them.
func RequireManyScheduled(t testing.TB, s *ax.Scheduler, want ...Expect) []*store.JobRecord {
	t.Helper()
	seen := map[string]bool{}
	var jobs []*store.JobRecord
	for _, w := range want {
		if !seen[w.Kind] {
			seen[w.Kind] = true
			jobs = append(jobs, jobsOf(t, s, w.Kind, waiting)...)
		}
	}
	slices.SortFunc(jobs, func(a, b *store.JobRecord) int { return bytes.Compare(a.ID[:], b.ID[:]) })
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
