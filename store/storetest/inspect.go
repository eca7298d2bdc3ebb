package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// inspectFixture is a set of jobs covering every field a JobFilter
// selects on, each named for the cases' expectations. Jobs are created in
// the order of names, so ID order (OldestFirst) is that order.
type inspectFixture struct {
	base  time.Time                   // a store time, whole second, before every job
	names []string                    // in creation (ID) order
	jobs  map[string]*store.JobRecord // as read after creation
}

// ids returns the IDs of the named jobs in creation order.
func (fx *inspectFixture) ids(names ...string) []uuid.UUID {
	var out []uuid.UUID
	for _, n := range fx.names {
		if slices.Contains(names, n) {
			out = append(out, fx.jobs[n].ID)
		}
	}
	return out
}

func withMetadata(md map[string]string) func(*store.InsertParams) {
	return func(p *store.InsertParams) { p.Metadata = md }
}

// newInspectFixture fills st with:
//
//	a1  insp.a  scheduled  high    run base+2h  key order:1   tenant=t1
//	a2  insp.a  running    normal  run base-3h  owner          tenant=t2
//	a3  insp.a  retrying   normal  run ≈base+1h owner, error "boom"
//	b1  insp.b  dead       low     run base-2h  key order:2   tenant=t1 region=eu, owner, error "fatal", finished 1st
//	b2  insp.b  succeeded  normal  run base-1h  owner, finished 2nd
//	b3  insp.b  cancelled  normal  run base+4h  key invoice:1, finished 3rd
//	c1  insp.c  paused     high    run base+3h
func newInspectFixture(t *testing.T, st store.Store) *inspectFixture {
	t.Helper()
	fx := &inspectFixture{
		base: storeNow(t, st).Truncate(time.Second),
		jobs: make(map[string]*store.JobRecord),
	}
	h := time.Hour
	steps := []struct {
		name  string
		state store.State
		kind  string
		mods  []func(*store.InsertParams)
	}{
		{"a1", store.StateScheduled, "insp.a", []func(*store.InsertParams){withPriority(store.PriorityHigh), withRunAt(fx.base.Add(2 * h)), withUniqueKey("order:1"), withMetadata(map[string]string{"tenant": "t1"})}},
		{"a2", store.StateRunning, "insp.a", []func(*store.InsertParams){withRunAt(fx.base.Add(-3 * h)), withMetadata(map[string]string{"tenant": "t2"})}},
		{"a3", store.StateRetrying, "insp.a", []func(*store.InsertParams){withRunAt(fx.base.Add(-4 * h))}},
		{"b1", store.StateDead, "insp.b", []func(*store.InsertParams){withPriority(store.PriorityLow), withRunAt(fx.base.Add(-2 * h)), withUniqueKey("order:2"), withMetadata(map[string]string{"tenant": "t1", "region": "eu"})}},
		{"b2", store.StateSucceeded, "insp.b", []func(*store.InsertParams){withRunAt(fx.base.Add(-1 * h))}},
		{"b3", store.StateCancelled, "insp.b", []func(*store.InsertParams){withRunAt(fx.base.Add(4 * h)), withUniqueKey("invoice:1")}},
		{"c1", store.StatePaused, "insp.c", []func(*store.InsertParams){withPriority(store.PriorityHigh), withRunAt(fx.base.Add(3 * h))}},
	}
	var lastFinish time.Time
	for _, s := range steps {
		if s.state.Final() && !lastFinish.IsZero() {
			// Finish times strictly increase, so bounds between them
			// select exactly.
			waitUntilStoreTime(t, st, lastFinish)
		}
		j := makeJob(t, st, s.state, s.kind, s.mods...)
		if s.state.Final() {
			lastFinish = j.FinishedAt
		}
		fx.names = append(fx.names, s.name)
		fx.jobs[s.name] = j
	}
	return fx
}

// testInspector checks the optional JobInspector: every filter field
// alone and combined, both orders, keyset paging (also with inserts
// between pages), CountMatching, complete records and refused params.
func testInspector(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	in := as[store.JobInspector](t, st)
	fx := newInspectFixture(t, st)
	all := []string{"a1", "a2", "a3", "b1", "b2", "b3", "c1"}
	h := time.Hour
	finished := func(n string) time.Time { return fx.jobs[n].FinishedAt }

	cases := []struct {
		name   string
		filter store.JobFilter
		want   []string
	}{
		{"Zero", store.JobFilter{}, all},
		{"IDs", store.JobFilter{IDs: fx.ids("b2", "a1")}, []string{"a1", "b2"}},
		{"IDsUnknown", store.JobFilter{IDs: []uuid.UUID{newID(t)}}, nil},
		{"Kind", store.JobFilter{Kinds: []string{"insp.a"}}, []string{"a1", "a2", "a3"}},
		{"Kinds", store.JobFilter{Kinds: []string{"insp.a", "insp.c"}}, []string{"a1", "a2", "a3", "c1"}},
		{"KindUnknown", store.JobFilter{Kinds: []string{"insp.none"}}, nil},
		{"State", store.JobFilter{States: []store.State{store.StateRunning}}, []string{"a2"}},
		{"States", store.JobFilter{States: []store.State{store.StateDead, store.StateCancelled}}, []string{"b1", "b3"}},
		{"Priority", store.JobFilter{Priorities: []int{store.PriorityHigh}}, []string{"a1", "c1"}},
		{"Priorities", store.JobFilter{Priorities: []int{store.PriorityLow, store.PriorityHigh}}, []string{"a1", "b1", "c1"}},
		{"RunAfter", store.JobFilter{RunAfter: fx.base}, []string{"a1", "a3", "b3", "c1"}},
		{"RunAfterInclusive", store.JobFilter{RunAfter: fx.base.Add(3 * h)}, []string{"b3", "c1"}},
		{"RunBefore", store.JobFilter{RunBefore: fx.base}, []string{"a2", "b1", "b2"}},
		{"RunBeforeExclusive", store.JobFilter{RunBefore: fx.base.Add(-2 * h)}, []string{"a2"}},
		{"RunBetween", store.JobFilter{RunAfter: fx.base.Add(2 * h), RunBefore: fx.base.Add(4 * h)}, []string{"a1", "c1"}},
		{"FinishedAfter", store.JobFilter{FinishedAfter: store.MinTime}, []string{"b1", "b2", "b3"}},
		{"FinishedAfterInclusive", store.JobFilter{FinishedAfter: finished("b2")}, []string{"b2", "b3"}},
		{"FinishedBefore", store.JobFilter{FinishedBefore: finished("b3")}, []string{"b1", "b2"}},
		{"FinishedBetween", store.JobFilter{FinishedAfter: finished("b2"), FinishedBefore: finished("b3")}, []string{"b2"}},
		{"FinishedBeforeFarFuture", store.JobFilter{FinishedBefore: store.MaxTime}, []string{"b1", "b2", "b3"}},
		{"UniqueKey", store.JobFilter{UniqueKey: "order:1"}, []string{"a1"}},
		{"UniqueKeyIsExact", store.JobFilter{UniqueKey: "order:"}, nil},
		{"UniqueKeyPrefix", store.JobFilter{UniqueKeyPrefix: "order:"}, []string{"a1", "b1"}},
		{"UniqueKeyPrefixWhole", store.JobFilter{UniqueKeyPrefix: "invoice:1"}, []string{"b3"}},
		{"UniqueKeyPrefixLiteral", store.JobFilter{UniqueKeyPrefix: "%"}, nil},
		{"UniqueKeyPrefixUnderscore", store.JobFilter{UniqueKeyPrefix: "order_"}, nil},
		{"Metadata", store.JobFilter{Metadata: map[string]string{"tenant": "t1"}}, []string{"a1", "b1"}},
		{"MetadataAll", store.JobFilter{Metadata: map[string]string{"tenant": "t1", "region": "eu"}}, []string{"b1"}},
		{"MetadataValue", store.JobFilter{Metadata: map[string]string{"tenant": "t3"}}, nil},
		{"ErrorContains", store.JobFilter{ErrorContains: "boo"}, []string{"a3"}},
		{"ErrorContainsCase", store.JobFilter{ErrorContains: "FATAL"}, nil},
		{"ErrorContainsFatal", store.JobFilter{ErrorContains: "fatal"}, []string{"b1"}},
		{"ErrorContainsLiteral", store.JobFilter{ErrorContains: "%"}, nil},
		{"Node", store.JobFilter{Node: owner}, []string{"a2", "a3", "b1", "b2"}},
		{"NodeUnknown", store.JobFilter{Node: "other-node"}, nil},
		{"KindAndStates", store.JobFilter{Kinds: []string{"insp.b"}, States: []store.State{store.StateDead, store.StateSucceeded}}, []string{"b1", "b2"}},
		{"KindNodeError", store.JobFilter{Kinds: []string{"insp.a"}, Node: owner, ErrorContains: "boom"}, []string{"a3"}},
		{"MetadataPriority", store.JobFilter{Metadata: map[string]string{"tenant": "t1"}, Priorities: []int{store.PriorityLow}}, []string{"b1"}},
		{"PrefixState", store.JobFilter{UniqueKeyPrefix: "order:", States: []store.State{store.StateScheduled}}, []string{"a1"}},
		{"FinishedAndKind", store.JobFilter{FinishedAfter: store.MinTime, Kinds: []string{"insp.a"}}, nil},
		{"IDsAndState", store.JobFilter{IDs: fx.ids("a1", "b1", "b2"), States: []store.State{store.StateDead, store.StateScheduled}}, []string{"a1", "b1"}},
		{"Disjoint", store.JobFilter{Kinds: []string{"insp.c"}, States: []store.State{store.StateRunning}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := fx.ids(c.want...)
			reversed := slices.Clone(want)
			slices.Reverse(reversed)
			for _, o := range []struct {
				order store.ListOrder
				want  []uuid.UUID
			}{{store.OldestFirst, want}, {store.NewestFirst, reversed}} {
				page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: c.filter, Order: o.order, Limit: store.MaxListLimit})
				require.NoError(t, err)
				require.Equal(t, o.want, recordIDs(page.Jobs), "order %d", o.order)
				require.Equal(t, uuid.Nil, page.Next, "Next of the only page")
				require.Equal(t, o.want, listAll(t, in, c.filter, o.order, 2), "paged by 2, order %d", o.order)
			}
			n, err := in.CountMatching(t.Context(), &c.filter)
			require.NoError(t, err)
			require.Equal(t, int64(len(want)), n, "CountMatching")
		})
	}

	t.Run("RecordsAreComplete", func(t *testing.T) {
		page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Limit: store.MaxListLimit, Order: store.OldestFirst})
		require.NoError(t, err)
		require.Len(t, page.Jobs, len(all))
		for _, j := range page.Jobs {
			requireSameRecord(t, get(t, st, j.ID), j)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		bad := []struct {
			name   string
			params store.ListJobsParams
		}{
			{"LimitZero", store.ListJobsParams{}},
			{"LimitNegative", store.ListJobsParams{Limit: -1}},
			{"LimitTooLarge", store.ListJobsParams{Limit: store.MaxListLimit + 1}},
			{"UnknownOrder", store.ListJobsParams{Limit: 1, Order: 7}},
			{"UnknownState", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{States: []store.State{"done"}}}},
			{"PriorityZero", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{Priorities: []int{0}}}},
			{"PriorityFour", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{Priorities: []int{4}}}},
			{"KindInvalidUTF8", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{Kinds: []string{invalidUTF8}}}},
			{"ErrorNUL", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{ErrorContains: "a\x00b"}}},
			{"NodeTooLong", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{Node: strings.Repeat("n", store.MaxUniqueKeyLength+1)}}},
			{"MetadataEmptyKey", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{Metadata: map[string]string{"": "v"}}}},
			{"TimeBefore1970", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{RunAfter: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)}}},
			{"TimeAfter9999", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{FinishedBefore: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}},
			{"TooManyKinds", store.ListJobsParams{Limit: 1, Filter: store.JobFilter{Kinds: make([]string, store.MaxFilterValues+1)}}},
		}
		for _, c := range bad {
			t.Run(c.name, func(t *testing.T) {
				_, err := in.ListJobs(t.Context(), &c.params)
				require.ErrorIs(t, err, store.ErrInvalidParams)
				if c.params.Limit == 1 && c.params.Order == store.NewestFirst {
					_, err = in.CountMatching(t.Context(), &c.params.Filter)
					require.ErrorIs(t, err, store.ErrInvalidParams, "CountMatching")
				}
			})
		}
	})

	t.Run("Paging", func(t *testing.T) { testInspectorPaging(t, newStore) })
	t.Run("Parent", func(t *testing.T) { testInspectorParent(t, newStore) })
}

// testInspectorParent: JobFilter.Parent selects what a job's end inserted
// (here its Then jobs), the jobs FollowUps lists, and no other: listed
// in brief and by page, counted, in any store that keeps follow-ups.
func testInspectorParent(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	in := as[store.JobInspector](t, st)
	if !hasFollowUps(st) {
		t.Skipf("store %T keeps no follow-ups", st)
	}
	parents := make([]uuid.UUID, 2)
	var thens [2][]uuid.UUID
	for i := range parents {
		parents[i] = insertOne(t, st, "insp.parent")
		var then []store.InsertParams
		for range 3 {
			then = append(then, params(t, "insp.then"))
			thens[i] = append(thens[i], then[len(then)-1].ID)
		}
		finishOne(t, st, claimOnly(t, st, "insp.parent", parents[i], longLease),
			store.FinishParams{Outcome: store.OutcomeSucceeded, Then: then})
	}
	for i, parent := range parents {
		f := store.JobFilter{Parent: parent}
		page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: f, Order: store.OldestFirst, Limit: 10, PreviewBytes: 8})
		require.NoError(t, err)
		require.ElementsMatch(t, thens[i], recordIDs(page.Jobs))
		require.ElementsMatch(t, thens[i], listAll(t, in, f, store.OldestFirst, 2), "paged by 2")
		ups, err := as[store.FollowUpStore](t, st).FollowUps(t.Context(), parent)
		require.NoError(t, err)
		require.ElementsMatch(t, recordIDs(ups), recordIDs(page.Jobs), "the jobs FollowUps lists")
		n, err := in.CountMatching(t.Context(), &f)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
	}
	page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: store.JobFilter{Parent: thens[0][0]}, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Jobs, "a job that made nothing")
}

// listAll pages through the jobs matching f, limit at a time, and
// returns their IDs; each page must be full except the last, and only the
// last has no Next.
func listAll(t *testing.T, in store.JobInspector, f store.JobFilter, order store.ListOrder, limit int) []uuid.UUID {
	t.Helper()
	var (
		got   []uuid.UUID
		after uuid.UUID
	)
	for range 10_000 {
		page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: f, Order: order, After: after, Limit: limit})
		require.NoError(t, err)
		got = append(got, recordIDs(page.Jobs)...)
		if page.Next == uuid.Nil {
			return got
		}
		require.Len(t, page.Jobs, limit, "a page with a Next is full")
		require.Equal(t, page.Jobs[len(page.Jobs)-1].ID, page.Next, "Next is the page's last job")
		after = page.Next
	}
	t.Fatal("paging did not end")
	return nil
}

// testInspectorPaging checks keyset paging: exact last pages, cursors
// that name no job, and jobs inserted between pages.
func testInspectorPaging(t *testing.T, newStore NewStoreFunc) {
	newPages := func(t *testing.T, n int) (store.Store, store.JobInspector, []uuid.UUID) {
		st := newStore(t)
		in := as[store.JobInspector](t, st)
		var ids []uuid.UUID
		for range n {
			ids = append(ids, insertOne(t, st, "page", notDue))
		}
		return st, in, ids
	}
	kind := store.JobFilter{Kinds: []string{"page"}}

	t.Run("ExactLastPage", func(t *testing.T) {
		_, in, ids := newPages(t, 9)
		for _, order := range []store.ListOrder{store.OldestFirst, store.NewestFirst} {
			after := uuid.Nil
			for page := range 3 {
				p, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: kind, Order: order, After: after, Limit: 3})
				require.NoError(t, err)
				require.Len(t, p.Jobs, 3)
				if page == 2 {
					require.Equal(t, uuid.Nil, p.Next, "a full last page has no Next")
				} else {
					require.NotEqual(t, uuid.Nil, p.Next)
				}
				after = p.Next
			}
		}
		require.Len(t, ids, 9)
	})

	t.Run("CursorNamesNoJob", func(t *testing.T) {
		_, in, ids := newPages(t, 4)
		later := newID(t) // sorts after every job, names none
		oldest, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: kind, Order: store.OldestFirst, After: later, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, oldest.Jobs)
		newest, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: kind, Order: store.NewestFirst, After: later, Limit: 10})
		require.NoError(t, err)
		want := slices.Clone(ids)
		slices.Reverse(want)
		require.Equal(t, want, recordIDs(newest.Jobs))
	})

	t.Run("InsertsBetweenPages", func(t *testing.T) {
		// New jobs sort after every cursor: oldest-first paging reaches
		// them, newest-first paging (already past them) does not, and
		// neither repeats or skips a job.
		st, in, ids := newPages(t, 6)
		first, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: kind, Order: store.OldestFirst, Limit: 4})
		require.NoError(t, err)
		newestFirst, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: kind, Order: store.NewestFirst, Limit: 4})
		require.NoError(t, err)
		added := []uuid.UUID{insertOne(t, st, "page", notDue), insertOne(t, st, "page", notDue)}

		rest := listAllAfter(t, in, kind, store.OldestFirst, first.Next, 4)
		require.Equal(t, append(slices.Clone(ids), added...), append(recordIDs(first.Jobs), rest...))

		restNewest := listAllAfter(t, in, kind, store.NewestFirst, newestFirst.Next, 4)
		want := slices.Clone(ids)
		slices.Reverse(want)
		require.Equal(t, want, append(recordIDs(newestFirst.Jobs), restNewest...))

		n, err := in.CountMatching(t.Context(), &kind)
		require.NoError(t, err)
		require.Equal(t, int64(len(ids)+len(added)), n)
	})
}

// listAllAfter is listAll from the cursor after.
func listAllAfter(t *testing.T, in store.JobInspector, f store.JobFilter, order store.ListOrder, after uuid.UUID, limit int) []uuid.UUID {
	t.Helper()
	require.NotEqual(t, uuid.Nil, after)
	var got []uuid.UUID
	for after != uuid.Nil {
		page, err := in.ListJobs(t.Context(), &store.ListJobsParams{Filter: f, Order: order, After: after, Limit: limit})
		require.NoError(t, err)
		got = append(got, recordIDs(page.Jobs)...)
		after = page.Next
	}
	return got
}
