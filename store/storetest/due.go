package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testDueInspector checks the optional DueInspector: per kind, the
// oldest due claimable job across priorities; paused, running, final and
// not yet due jobs do not count.
func testDueInspector(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	di := as[store.DueInspector](t, st)

	before := storeNow(t, st)
	rep, err := di.OldestDue(t.Context())
	require.NoError(t, err)
	requireBetween(t, before, storeNow(t, st), rep.Now, "Now")
	require.Empty(t, rep.Kinds, "an empty store")

	base := storeNow(t, st).Truncate(time.Second)
	insertOne(t, st, "due.x", withRunAt(base.Add(-2*time.Minute)))
	insertOne(t, st, "due.x", withRunAt(base.Add(-time.Minute)))
	insertOne(t, st, "due.y", withRunAt(base.Add(-30*time.Second)), withPriority(store.PriorityHigh))
	insertOne(t, st, "due.y", withRunAt(base.Add(-5*time.Minute)), withPriority(store.PriorityLow))
	insertOne(t, st, "due.z", notDue)
	paused := insertOne(t, st, "due.paused", withRunAt(base.Add(-time.Hour)))
	control(t, st, paused, store.OpPause)
	makeJob(t, st, store.StateRunning, "due.running", withRunAt(base.Add(-time.Hour)))
	makeJob(t, st, store.StateDead, "due.dead", withRunAt(base.Add(-time.Hour)))
	retrying := makeJob(t, st, store.StateRetrying, "due.retrying", withRunAt(base.Add(-time.Hour)))
	require.True(t, retrying.RunAt.After(base), "the retry is not due yet")
	insertOne(t, st, "due.later", withRunAt(base.Add(-10*time.Second)))

	rep, err = di.OldestDue(t.Context())
	require.NoError(t, err)
	require.Len(t, rep.Kinds, 3, "%+v", rep.Kinds)
	want := []store.KindDue{
		{Kind: "due.later", OldestRunAt: base.Add(-10 * time.Second)},
		{Kind: "due.x", OldestRunAt: base.Add(-2 * time.Minute)},
		{Kind: "due.y", OldestRunAt: base.Add(-5 * time.Minute)},
	}
	for i, w := range want {
		require.Equal(t, w.Kind, rep.Kinds[i].Kind, "ordered by kind")
		requireTimeNear(t, w.OldestRunAt, rep.Kinds[i].OldestRunAt, storedTolerance, w.Kind)
	}
}
