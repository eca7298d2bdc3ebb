package storetest

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// as returns st as T, or skips the test when st does not implement it.
func as[T any](t *testing.T, st store.Store) T {
	t.Helper()
	v, ok := st.(T)
	if !ok {
		var zero *T
		t.Skipf("store %T does not implement %T", st, zero)
	}
	return v
}

// skipUnless skips the whole area when the stores newStore makes do not
// implement T, at the cost of one store rather than one per subtest.
func skipUnless[T any](t *testing.T, newStore NewStoreFunc) {
	t.Helper()
	as[T](t, newStore(t))
}

// recorder collects notifications.
type recorder struct {
	mu    sync.Mutex
	notes []store.Notification
	wake  chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

// record is the subscriber callback; it never blocks.
func (r *recorder) record(n store.Notification) {
	r.mu.Lock()
	r.notes = append(r.notes, n)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// recorded returns a copy of the notifications recorded so far.
func (r *recorder) recorded() []store.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.Notification(nil), r.notes...)
}

// waitFor waits until a recorded notification satisfies match.
func (r *recorder) waitFor(t *testing.T, what string, match func(store.Notification) bool) {
	t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for {
		notes := r.recorded()
		for _, n := range notes {
			if match(n) {
				return
			}
		}
		select {
		case <-r.wake:
		case <-timeout.C:
			t.Fatalf("no notification %s within %s; got %+v", what, waitTimeout, notes)
		}
	}
}

// notifiesRunAt matches a notification for kind whose RunAt is near at.
func notifiesRunAt(kind string, at time.Time) func(store.Notification) bool {
	return func(n store.Notification) bool {
		return n.Kind == kind && !n.RunAt.IsZero() && n.RunAt.Sub(at).Abs() <= clockTolerance
	}
}

// testNotifier checks the optional Notifier.
func testNotifier(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name string
		// prepare sets a job up and returns the action that should notify
		// and its job's ID.
		prepare func(t *testing.T, st store.Store) (act func(), id uuid.UUID)
	}{
		{"Insert", func(t *testing.T, st store.Store) (func(), uuid.UUID) {
			p := params(t, "notify", withDelay(10*time.Minute))
			return func() { insert(t, st, p) }, p.ID
		}},
		{"InsertDue", func(t *testing.T, st store.Store) (func(), uuid.UUID) {
			p := params(t, "notify")
			return func() { insert(t, st, p) }, p.ID
		}},
		{"RunNow", func(t *testing.T, st store.Store) (func(), uuid.UUID) {
			j := makeJob(t, st, store.StateScheduled, "notify")
			return func() { control(t, st, j.ID, store.OpRunNow) }, j.ID
		}},
		{"Resume", func(t *testing.T, st store.Store) (func(), uuid.UUID) {
			id := insertOne(t, st, "notify", withRunAt(storeNow(t, st).Add(-time.Minute)))
			control(t, st, id, store.OpPause)
			return func() { control(t, st, id, store.OpResume) }, id
		}},
		{"Retry", func(t *testing.T, st store.Store) (func(), uuid.UUID) {
			j := makeJob(t, st, store.StateRunning, "notify")
			return func() {
				finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Delay: time.Second, Error: "e"})
			}, j.ID
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			n := as[store.Notifier](t, st)
			act, id := c.prepare(t, st)
			rec := newRecorder()
			unsubscribe := n.Subscribe(rec.record)
			t.Cleanup(unsubscribe)
			act()
			rec.waitFor(t, "for the job's run_at", notifiesRunAt("notify", get(t, st, id).RunAt))
		})
	}

	t.Run("Unsubscribe", func(t *testing.T) {
		st := newStore(t)
		n := as[store.Notifier](t, st)
		var stopped, lateCall atomic.Bool
		first := n.Subscribe(func(store.Notification) {
			if stopped.Load() {
				lateCall.Store(true)
			}
		})
		rec := newRecorder()
		second := n.Subscribe(rec.record)
		t.Cleanup(second)

		first()
		stopped.Store(true)
		first() // safe to call twice

		p := params(t, "notify.after")
		insert(t, st, p)
		rec.waitFor(t, "to the remaining subscriber", notifiesRunAt("notify.after", get(t, st, p.ID).RunAt))
		require.False(t, lateCall.Load(), "fn called after unsubscribe returned")
	})
}

// testPruner checks the optional Pruner.
func testPruner(t *testing.T, newStore NewStoreFunc) {
	t.Run("DeletesOldFinalJobsOnly", func(t *testing.T) {
		st := newStore(t)
		p := as[store.Pruner](t, st)
		var final, live []*store.JobRecord
		for _, s := range []store.State{store.StateSucceeded, store.StateDead, store.StateCancelled} {
			final = append(final, makeJob(t, st, s, "prune."+string(s), withUnique("key", finished)))
		}
		for _, s := range []store.State{store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateRunning} {
			live = append(live, makeJob(t, st, s, "prune."+string(s)))
		}
		latest := time.Time{}
		for _, j := range final {
			latest = maxTime(latest, j.FinishedAt)
		}

		// Within retention: nothing goes.
		n, err := p.Prune(t.Context(), &store.PruneParams{Retention: time.Hour, Limit: 100})
		require.NoError(t, err)
		require.Zero(t, n)

		retention := 10 * time.Millisecond
		waitUntilStoreTime(t, st, latest.Add(retention+time.Millisecond))
		n, err = p.Prune(t.Context(), &store.PruneParams{Retention: retention, Limit: 100})
		require.NoError(t, err)
		require.Equal(t, len(final), n)
		for _, j := range final {
			requireNotFound(t, st, j.ID)
			require.Equal(t, []bool{false}, finish(t, st, store.FinishParams{Lease: store.Lease{ID: j.ID, Token: newID(t)}, Outcome: store.OutcomeSucceeded}))
		}
		for _, j := range live {
			requireUnchanged(t, st, j)
		}
		// The pruned jobs no longer hold their unique keys (which their
		// scope kept held while they existed).
		insert(t, st, params(t, "prune.succeeded", withUnique("key", finished)), params(t, "prune.dead", withUnique("key", finished)))
	})

	t.Run("Limit", func(t *testing.T) {
		st := newStore(t)
		p := as[store.Pruner](t, st)
		var latest time.Time
		for range 5 {
			latest = maxTime(latest, makeJob(t, st, store.StateSucceeded, "prune").FinishedAt)
		}
		waitUntilStoreTime(t, st, latest.Add(2*time.Millisecond))
		steps := []struct{ limit, want int }{{2, 2}, {2, 2}, {10, 1}, {10, 0}}
		for _, s := range steps {
			n, err := p.Prune(t.Context(), &store.PruneParams{Retention: time.Millisecond, Limit: s.limit})
			require.NoError(t, err)
			require.Equal(t, s.want, n, "Prune limit %d", s.limit)
		}
	})

	t.Run("InvalidLimit", func(t *testing.T) {
		for _, limit := range []int{0, -1} {
			st := newStore(t)
			p := as[store.Pruner](t, st)
			j := makeJob(t, st, store.StateSucceeded, "prune")
			waitUntilStoreTime(t, st, j.FinishedAt.Add(2*time.Millisecond))
			_, err := p.Prune(t.Context(), &store.PruneParams{Retention: time.Millisecond, Limit: limit})
			require.ErrorIs(t, err, store.ErrInvalidParams, "limit %d", limit)
			requireUnchanged(t, st, j)
		}
	})
}

// testLister checks the optional Lister.
func testLister(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	l := as[store.Lister](t, st)

	// Jobs: kind a in several states, kind b scheduled.
	byState := map[store.State][]uuid.UUID{}
	var all, kindA []uuid.UUID
	for _, s := range []store.State{store.StateScheduled, store.StateScheduled, store.StateDead, store.StatePaused, store.StateRunning, store.StateDead} {
		j := makeJob(t, st, s, "list.a")
		byState[s] = append(byState[s], j.ID)
		kindA = append(kindA, j.ID)
		all = append(all, j.ID)
	}
	var kindB []uuid.UUID
	for range 3 {
		id := insertOne(t, st, "list.b", notDue)
		kindB = append(kindB, id)
		all = append(all, id)
	}
	deadOrPausedA := append(append([]uuid.UUID(nil), byState[store.StateDead]...), byState[store.StatePaused]...)

	cases := []struct {
		name   string
		params store.ListParams
		want   []uuid.UUID
	}{
		{"All", store.ListParams{Limit: 100}, all},
		{"Kind", store.ListParams{Kind: "list.b", Limit: 100}, kindB},
		{"States", store.ListParams{States: []store.State{store.StateDead, store.StatePaused}, Limit: 100}, deadOrPausedA},
		{"KindAndState", store.ListParams{Kind: "list.b", States: []store.State{store.StateDead}, Limit: 100}, nil},
		{"KindAndScheduled", store.ListParams{Kind: "list.a", States: []store.State{store.StateScheduled}, Limit: 100}, byState[store.StateScheduled]},
		{"UnknownKind", store.ListParams{Kind: "nope", Limit: 100}, nil},
		{"Limit", store.ListParams{Limit: 4}, sortedIDs(all)[:4]},
		{"After", store.ListParams{After: sortedIDs(all)[3], Limit: 100}, sortedIDs(all)[4:]},
		{"AfterLast", store.ListParams{After: sortedIDs(all)[len(all)-1], Limit: 100}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			jobs, err := l.List(t.Context(), &c.params)
			require.NoError(t, err)
			require.Equal(t, sortedIDs(c.want), recordIDs(jobs), "ordered by ID")
		})
	}

	t.Run("Paging", func(t *testing.T) {
		var got []uuid.UUID
		after := uuid.Nil
		for page := 0; page < len(all)+1; page++ {
			jobs, err := l.List(t.Context(), &store.ListParams{After: after, Limit: 2})
			require.NoError(t, err)
			require.LessOrEqual(t, len(jobs), 2)
			if len(jobs) == 0 {
				break
			}
			got = append(got, recordIDs(jobs)...)
			after = jobs[len(jobs)-1].ID
		}
		require.Equal(t, sortedIDs(all), got)
	})

	t.Run("RecordsAreComplete", func(t *testing.T) {
		jobs, err := l.List(t.Context(), &store.ListParams{Kind: "list.a", States: []store.State{store.StateRunning}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		requireSameRecord(t, get(t, st, jobs[0].ID), jobs[0])
	})

	t.Run("InvalidLimit", func(t *testing.T) {
		for _, limit := range []int{0, -1} {
			_, err := l.List(t.Context(), &store.ListParams{Limit: limit})
			require.ErrorIs(t, err, store.ErrInvalidParams, "limit %d", limit)
		}
	})
}

// testCounter checks the optional Counter.
func testCounter(t *testing.T, newStore NewStoreFunc) {
	t.Run("Empty", func(t *testing.T) {
		st := newStore(t)
		c := as[store.Counter](t, st)
		counts, err := c.CountJobs(t.Context())
		require.NoError(t, err)
		require.Empty(t, counts)
	})
	t.Run("ByKindAndState", func(t *testing.T) {
		st := newStore(t)
		c := as[store.Counter](t, st)
		for _, s := range []store.State{store.StateScheduled, store.StateScheduled, store.StateRunning, store.StateDead} {
			makeJob(t, st, s, "count.a")
		}
		makeJob(t, st, store.StateDead, "count.b")
		makeJob(t, st, store.StatePaused, "count.b")
		counts, err := c.CountJobs(t.Context())
		require.NoError(t, err)
		require.ElementsMatch(t, []store.StateCount{
			{Kind: "count.a", State: store.StateScheduled, Count: 2},
			{Kind: "count.a", State: store.StateRunning, Count: 1},
			{Kind: "count.a", State: store.StateDead, Count: 1},
			{Kind: "count.b", State: store.StateDead, Count: 1},
			{Kind: "count.b", State: store.StatePaused, Count: 1},
		}, counts)
	})
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sortedIDs returns ids sorted as a store orders them (bytewise), or nil.
func sortedIDs(ids []uuid.UUID) []uuid.UUID {
	if len(ids) == 0 {
		return nil
	}
	s := append([]uuid.UUID(nil), ids...)
	for i := 1; i < len(s); i++ {
		for k := i; k > 0 && bytes.Compare(s[k][:], s[k-1][:]) < 0; k-- {
			s[k], s[k-1] = s[k-1], s[k]
		}
	}
	return s
}

// recordIDs returns the IDs of jobs, or nil.
func recordIDs(jobs []*store.JobRecord) []uuid.UUID {
	if len(jobs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}
