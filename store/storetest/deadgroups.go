package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testDeadGroups checks DeadGrouper against a reference computed from
// the jobs themselves (store.DeadGroupsParams.Matches and
// store.DeadErrorLine): the error line is the first line of the latest
// error, trimmed, cut in characters; only dead jobs count; the order, the
// limit, the total, the kind filters and the time window.
func testDeadGroups(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	dg := as[store.DeadGrouper](t, st)
	in := as[store.JobInspector](t, st)

	dead := func(kind string, errs ...string) *store.JobRecord {
		id := insertOne(t, st, kind, withMaxAttempts(len(errs)+1))
		for i, e := range errs {
			j := claimOnly(t, st, kind, id, longLease)
			outcome := store.OutcomeRetry
			if i == len(errs)-1 {
				outcome = store.OutcomeDead
			}
			finishOne(t, st, j, store.FinishParams{Outcome: outcome, Error: e})
		}
		return get(t, st, id)
	}
	long := strings.Repeat("é", store.DeadErrorLineRunes) + "ü and more"
	var first []*store.JobRecord
	for range 3 {
		first = append(first, dead("dg.a", "550 mailbox full\n\tat smtp.go:12"))
	}
	first = append(first, dead("dg.a", " \t550 mailbox full \r"))
	first = append(first, dead("dg.a", "first try failed", "421 try later"))
	first = append(first, dead("dg.b", "550 mailbox full"))
	// The window starts here.
	mid := waitPast(t, st, first[len(first)-1].FinishedAt)
	dead("dg.b", long)
	dead("dg.b", long+" but longer")
	dead("dg.b", "\nthe first line is empty")
	dead("dg.c", "421 try later")
	// Not dead: never counted.
	makeJob(t, st, store.StateRetrying, "dg.a")
	makeJob(t, st, store.StateCancelled, "dg.a")

	page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: store.JobFilter{Kinds: []string{"dg.a", "dg.b", "dg.c"}}, Limit: 100})
	require.NoError(t, err)
	all := page.Jobs
	check := func(name string, p store.DeadGroupsParams) {
		t.Helper()
		want := referenceDeadGroups(all, &p)
		got, err := dg.DeadGroups(t.Context(), &p)
		require.NoError(t, err, name)
		for i := range got.Groups {
			got.Groups[i].Newest = got.Groups[i].Newest.UTC().Round(0)
		}
		require.Equal(t, want, got, name)
	}
	check("All", store.DeadGroupsParams{Limit: 100})
	check("Limit", store.DeadGroupsParams{Limit: 2})
	check("Kinds", store.DeadGroupsParams{Kinds: []string{"dg.b", "dg.c"}, Limit: 100})
	check("ExceptKinds", store.DeadGroupsParams{ExceptKinds: []string{"dg.b"}, Limit: 100})
	check("DiedAfter", store.DeadGroupsParams{DiedAfter: mid, Limit: 100})
	check("DiedBefore", store.DeadGroupsParams{DiedBefore: mid, Limit: 100})
	check("None", store.DeadGroupsParams{Kinds: []string{"dg.none"}, Limit: 100})

	// The reference agrees with what the cases mean.
	ref := referenceDeadGroups(all, &store.DeadGroupsParams{Limit: 100})
	require.Equal(t, store.DeadGroup{Kind: "dg.a", Error: "550 mailbox full", Count: 4}, withoutTimes(ref.Groups[0]))
	require.Contains(t, withoutTimesAll(ref.Groups), store.DeadGroup{Kind: "dg.b", Error: strings.Repeat("é", store.DeadErrorLineRunes), Count: 2})
	require.Contains(t, withoutTimesAll(ref.Groups), store.DeadGroup{Kind: "dg.b", Error: "", Count: 1})
	require.Contains(t, withoutTimesAll(ref.Groups), store.DeadGroup{Kind: "dg.a", Error: "421 try later", Count: 1})

	for _, p := range []store.DeadGroupsParams{{}, {Limit: store.MaxListLimit + 1}, {Limit: 1, Kinds: []string{"bad\x00"}}} {
		_, err := dg.DeadGroups(t.Context(), &p)
		require.ErrorIs(t, err, store.ErrInvalidParams, "%+v", p)
	}
}

// waitPast waits until the store's clock is past tm and returns its time.
func waitPast(t *testing.T, st store.Store, tm time.Time) time.Time {
	t.Helper()
	waitUntilStoreTime(t, st, tm.Add(time.Microsecond))
	return storeNow(t, st)
}

// referenceDeadGroups groups jobs as a DeadGrouper must
// (store.GroupDead), with times as a database returns them.
func referenceDeadGroups(jobs []*store.JobRecord, p *store.DeadGroupsParams) *store.DeadGroupReport {
	rep := store.GroupDead(jobs, p)
	for i := range rep.Groups {
		rep.Groups[i].Newest = rep.Groups[i].Newest.UTC().Round(0)
	}
	return rep
}

func withoutTimes(g store.DeadGroup) store.DeadGroup {
	g.Newest, g.Sample = time.Time{}, [16]byte{}
	return g
}

func withoutTimesAll(gs []store.DeadGroup) []store.DeadGroup {
	out := make([]store.DeadGroup, len(gs))
	for i, g := range gs {
		out[i] = withoutTimes(g)
	}
	return out
}
