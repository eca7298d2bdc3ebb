package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testUnhandledKinds checks that what a store keeps of its nodes and due
// jobs (NodeRegistry, DueInspector) is what store.UnhandledKinds needs to
// find the kinds no node handles: each node's kinds, replaced by a
// heartbeat; a stopped node's stop time; the oldest due job per kind; one
// clock for all. Time passing is played by reading the same records at a
// later Now.
func testUnhandledKinds(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	reg := as[store.NodeRegistry](t, st)
	di := as[store.DueInspector](t, st)
	ctx := t.Context()
	heartbeat := func(name string, kinds ...string) {
		t.Helper()
		require.NoError(t, reg.HeartbeatNode(ctx, &store.NodeParams{Name: name, Kinds: kinds, TTL: 24 * time.Hour}))
	}
	heartbeat("web")
	heartbeat("worker", "email")
	heartbeat("old-worker", "report")
	_, err := reg.StopNode(ctx, "old-worker")
	require.NoError(t, err)
	base := storeNow(t, st)
	for _, kind := range []string{"email", "emial", "report"} {
		insertOne(t, st, kind, withRunAt(base.Add(-time.Hour)))
	}
	insertOne(t, st, "later", withRunAt(base.Add(time.Hour)))

	read := func() ([]*store.NodeRecord, *store.DueReport) {
		t.Helper()
		nodes, err := reg.ListNodes(ctx)
		require.NoError(t, err)
		rep, err := di.OldestDue(ctx)
		require.NoError(t, err)
		return nodes, rep
	}
	nodes, rep := read()
	const grace = 5 * time.Minute
	cases := []struct {
		name  string
		after time.Duration // added to the report's Now
		want  []string
	}{
		{"now: the cluster just started", 0, nil},
		{"a minute later: report's host stopped within the grace", time.Minute, nil},
		{"past the grace", grace + time.Minute, []string{"emial", "report"}},
	}
	for _, c := range cases {
		later := *rep
		later.Now = rep.Now.Add(c.after)
		require.Equal(t, c.want, kindsOf(store.UnhandledKinds(nodes, &later, grace)), c.name)
	}

	// A heartbeat replaces the node's kinds: report is handled again,
	// email no longer is.
	heartbeat("worker", "report", "emial")
	nodes, rep = read()
	later := *rep
	later.Now = rep.Now.Add(grace + time.Minute)
	require.Equal(t, []string{"email"}, kindsOf(store.UnhandledKinds(nodes, &later, grace)), "after the heartbeat")
}

func kindsOf(due []store.KindDue) []string {
	var out []string
	for _, k := range due {
		out = append(out, k.Kind)
	}
	return out
}
