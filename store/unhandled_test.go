package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestUnhandledKinds: a kind is unhandled only when its jobs have been
// due for the grace, no live node lists it, no node listing it left
// within the grace, and the cluster is older than the grace.
func TestUnhandledKinds(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const grace = 5 * time.Minute
	old := now.Add(-time.Hour)
	running := func(name string, started time.Time, kinds ...string) *store.NodeRecord {
		return &store.NodeRecord{Name: name, Kinds: kinds, State: store.NodeRunning, StartedAt: started, HeartbeatAt: now, ExpiresAt: now.Add(15 * time.Second)}
	}
	gone := func(name string, state store.NodeState, at time.Time, kinds ...string) *store.NodeRecord {
		return &store.NodeRecord{Name: name, Kinds: kinds, State: state, StartedAt: old, HeartbeatAt: at, ExpiresAt: at}
	}
	due := func(kind string, ago time.Duration) store.KindDue {
		return store.KindDue{Kind: kind, OldestRunAt: now.Add(-ago)}
	}
	cases := []struct {
		name  string
		nodes []*store.NodeRecord
		due   []store.KindDue
		want  []string
	}{
		{"nothing due", []*store.NodeRecord{running("a", old, "email")}, nil, nil},
		{"handled by a live node", []*store.NodeRecord{running("a", old, "email")}, []store.KindDue{due("email", time.Hour)}, nil},
		{"misspelt kind", []*store.NodeRecord{running("a", old, "email")},
			[]store.KindDue{due("emial", 10*time.Minute), due("email", time.Hour)}, []string{"emial"}},
		{"due exactly the grace", []*store.NodeRecord{running("a", old, "email")}, []store.KindDue{due("emial", grace)}, []string{"emial"}},
		{"due for less than the grace", []*store.NodeRecord{running("a", old, "email")}, []store.KindDue{due("emial", grace-time.Second)}, nil},
		{"cluster younger than the grace", []*store.NodeRecord{running("a", now.Add(-time.Minute), "email")},
			[]store.KindDue{due("emial", time.Hour)}, nil},
		{"one old live node is enough", []*store.NodeRecord{running("a", now.Add(-time.Minute), "email"), running("b", old)},
			[]store.KindDue{due("emial", time.Hour)}, []string{"emial"}},
		{"rolling deploy: its host stopped a minute ago", []*store.NodeRecord{running("b", old, "email"), gone("a", store.NodeStopped, now.Add(-time.Minute), "report")},
			[]store.KindDue{due("report", time.Hour)}, nil},
		{"its host died a minute ago", []*store.NodeRecord{running("b", old), gone("a", store.NodeDead, now.Add(-time.Minute), "report")},
			[]store.KindDue{due("report", time.Hour)}, nil},
		{"its host stopped long ago", []*store.NodeRecord{running("b", old, "email"), gone("a", store.NodeStopped, now.Add(-10*time.Minute), "report")},
			[]store.KindDue{due("report", time.Hour)}, []string{"report"}},
		{"lapsed but not yet marked dead", []*store.NodeRecord{running("b", old), {Name: "a", Kinds: []string{"report"}, State: store.NodeRunning, StartedAt: old, ExpiresAt: now.Add(-time.Hour)}},
			[]store.KindDue{due("report", time.Hour)}, []string{"report"}},
		{"no live node at all", []*store.NodeRecord{gone("a", store.NodeStopped, now.Add(-time.Hour), "email")},
			[]store.KindDue{due("email", time.Hour)}, []string{"email"}},
		{"no node ever", nil, []store.KindDue{due("email", time.Hour)}, []string{"email"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, k := range store.UnhandledKinds(c.nodes, &store.DueReport{Now: now, Kinds: c.due}, grace) {
				got = append(got, k.Kind)
			}
			require.Equal(t, c.want, got)
		})
	}
}
