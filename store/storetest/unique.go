package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// Scopes used by the unique-key area. yearly has the longest period, so
// that a test's few inserts almost never straddle a window boundary
// (inOneWindow retries the rare one that does); secondly has the shortest,
// so that a test can wait for the next window.
var (
	perKind        = store.UniqueScope{}
	global         = store.UniqueScope{Global: true}
	finished       = store.UniqueScope{Finished: true}
	globalFinished = store.UniqueScope{Global: true, Finished: true}
	yearly         = store.UniqueScope{Period: store.MaxUniquePeriod}
	secondly       = store.UniqueScope{Period: time.Second}
)

// withUnique gives the job key in scope u.
func withUnique(key string, u store.UniqueScope) func(*store.InsertParams) {
	return func(p *store.InsertParams) { p.UniqueKey, p.Unique = key, u }
}

// scopeName names u for subtest names.
func scopeName(u store.UniqueScope) string {
	switch u {
	case perKind:
		return "PerKind"
	case global:
		return "Global"
	case finished:
		return "Finished"
	case globalFinished:
		return "GlobalFinished"
	case yearly:
		return "Yearly"
	case secondly:
		return "Secondly"
	}
	return fmt.Sprintf("%+v", u)
}

// window returns the index of the Period window of u that holds tm
// (windows are aligned to the Unix epoch), or 0 without a Period.
func window(u store.UniqueScope, tm time.Time) int64 {
	if u.Period <= 0 {
		return 0
	}
	return tm.Unix() / int64(u.Period/time.Second)
}

// inOneWindow runs fn with a fresh key until the store clock stayed in
// one Period window of u from before fn to after it, so that fn may expect
// every insert it makes with u to share a window. fn makes the assertions
// that depend on that with a: they count only for a try that stayed in
// one window (a try that crossed a boundary is run again with another
// key); its other assertions, on t, always count. A run shorter than the
// period crosses at most one boundary, so the second try is the last
// anyone will see; without a Period, fn runs once.
func inOneWindow(t *testing.T, st store.Store, u store.UniqueScope, fn func(a *require.Assertions, key string)) {
	t.Helper()
	for try := range 3 {
		before := storeNow(t, st)
		soft := &softT{}
		func() {
			defer func() {
				if r := recover(); r != nil && r != soft {
					panic(r)
				}
			}()
			fn(require.New(soft), fmt.Sprintf("key-%d", try))
		}()
		if window(u, before) == window(u, storeNow(t, st)) {
			if soft.failed {
				t.Fatal(soft.msg)
			}
			return
		}
	}
	t.Fatalf("the store clock crossed a %s window boundary three times in a row", u.Period)
}

// softT is a require.TestingT that records the first failure of a try of
// inOneWindow instead of failing the test: FailNow panics with the softT
// itself, which inOneWindow recovers.
type softT struct {
	failed bool
	msg    string
}

func (s *softT) Errorf(format string, args ...any) {
	if !s.failed {
		s.failed, s.msg = true, fmt.Sprintf(format, args...)
	}
}

func (s *softT) FailNow() { panic(s) }

// insertResult inserts p alone and returns its result.
func insertResult(t *testing.T, st store.Store, p store.InsertParams) store.InsertResult {
	t.Helper()
	res, err := st.Insert(t.Context(), []store.InsertParams{p})
	require.NoError(t, err)
	require.Len(t, res, 1)
	return res[0]
}

// testUniqueScope checks the unique-key scopes store.UniqueScope
// documents: a key is unique among the jobs of one kind unless Global,
// held while its job is live unless Finished or a Period keeps it held by
// a finished job, bucketed by insert-time windows with a Period, and never
// held by a cancelled job; the holder's ID is returned for a duplicate,
// concurrent inserts yield one job, and RunNow of a job that gave its key
// up takes it back or fails with store.ErrWrongState.
func testUniqueScope(t *testing.T, newStore NewStoreFunc) {
	t.Run("RecordKeepsScope", func(t *testing.T) {
		st := newStore(t)
		for _, u := range []store.UniqueScope{perKind, global, finished, globalFinished, yearly} {
			id := insertOne(t, st, "unique.record", withUnique("record-"+scopeName(u), u))
			j := get(t, st, id)
			require.Equal(t, "record-"+scopeName(u), j.UniqueKey)
			require.Equal(t, u, j.Unique, "scope of %s", scopeName(u))
		}
		id := insertOne(t, st, "unique.record", withUnique("", globalFinished))
		require.Zero(t, get(t, st, id).Unique, "a job without a key has the zero scope")
	})

	// Which keys collide: a second insert of the same key, in the same or
	// another kind, with the same or another scope, while the first job
	// is scheduled. Where the key holds is the kind (or the global space)
	// and, with a Period, the period and its window; Finished only says
	// how long a holder keeps it, so it does not separate keys.
	collisions := []struct {
		name          string
		first, second store.UniqueScope
		otherKind     bool
		dup           bool
	}{
		{"PerKindSameKind", perKind, perKind, false, true},
		{"PerKindOtherKind", perKind, perKind, true, false},
		{"GlobalSameKind", global, global, false, true},
		{"GlobalOtherKind", global, global, true, true},
		{"GlobalThenPerKind", global, perKind, false, false},
		{"PerKindThenGlobal", perKind, global, false, false},
		{"FinishedThenPerKind", finished, perKind, false, true},
		{"PerKindThenFinished", perKind, finished, false, true},
		{"GlobalFinishedOtherKind", globalFinished, global, true, true},
		{"PeriodSameKind", yearly, yearly, false, true},
		{"PeriodOtherKind", yearly, yearly, true, false},
		{"PeriodGlobalOtherKind", store.UniqueScope{Global: true, Period: store.MaxUniquePeriod},
			store.UniqueScope{Global: true, Period: store.MaxUniquePeriod}, true, true},
		{"PeriodThenNone", yearly, perKind, false, false},
		{"NoneThenPeriod", perKind, yearly, false, false},
		{"OtherPeriod", yearly, store.UniqueScope{Period: store.MaxUniquePeriod - time.Second}, false, false},
	}
	for _, c := range collisions {
		t.Run("Collide/"+c.name, func(t *testing.T) {
			st := newStore(t)
			inOneWindow(t, st, c.first, func(a *require.Assertions, key string) {
				holder := makeJob(t, st, store.StateScheduled, "unique.a", withUnique(key, c.first))
				kind := map[bool]string{false: "unique.a", true: "unique.b"}[c.otherKind]
				p := params(t, kind, notDue, withUnique(key, c.second))
				want := map[bool]store.InsertResult{
					false: {ID: p.ID},
					true:  {ID: holder.ID, Duplicate: true},
				}[c.dup]
				a.Equal(want, insertResult(t, st, p))
				requireUnchanged(t, st, holder)
			})
		})
	}

	// A live job holds its key in every scope.
	for _, state := range []store.State{store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateRunning} {
		for _, u := range []store.UniqueScope{perKind, global, finished, yearly} {
			t.Run("HeldWhen"+stateName(state)+"/"+scopeName(u), func(t *testing.T) {
				st := newStore(t)
				inOneWindow(t, st, u, func(a *require.Assertions, key string) {
					holder := makeJob(t, st, state, "unique.live", withUnique(key, u))
					dup := params(t, "unique.live", withUnique(key, u))
					a.Equal(store.InsertResult{ID: holder.ID, Duplicate: true}, insertResult(t, st, dup))
					_, err := st.Get(t.Context(), dup.ID)
					a.ErrorIs(err, store.ErrNotFound)
					requireUnchanged(t, st, holder)
				})
			})
		}
	}

	// Whether a job that ended in each final state still holds its key:
	// only when its scope keeps finished jobs' keys (Finished, or within
	// its Period window), and never when cancelled.
	ends := []struct {
		scope store.UniqueScope
		state store.State
		held  bool
	}{
		{perKind, store.StateSucceeded, false},
		{perKind, store.StateDead, false},
		{perKind, store.StateCancelled, false},
		{global, store.StateSucceeded, false},
		{global, store.StateDead, false},
		{global, store.StateCancelled, false},
		{finished, store.StateSucceeded, true},
		{finished, store.StateDead, true},
		{finished, store.StateCancelled, false},
		{globalFinished, store.StateSucceeded, true},
		{globalFinished, store.StateDead, true},
		{globalFinished, store.StateCancelled, false},
		{yearly, store.StateSucceeded, true},
		{yearly, store.StateDead, true},
		{yearly, store.StateCancelled, false},
	}
	for _, e := range ends {
		t.Run("After"+stateName(e.state)+"/"+scopeName(e.scope), func(t *testing.T) {
			st := newStore(t)
			inOneWindow(t, st, e.scope, func(a *require.Assertions, key string) {
				old := makeJob(t, st, e.state, "unique.end", withUnique(key, e.scope))
				again := params(t, "unique.end", notDue, withUnique(key, e.scope))
				want := map[bool]store.InsertResult{
					false: {ID: again.ID},
					true:  {ID: old.ID, Duplicate: true},
				}[e.held]
				a.Equal(want, insertResult(t, st, again))
				requireUnchanged(t, st, old)
			})
		})
	}

	// Every way a job can end gives its key up in the default scope: a
	// success, a dead end, a retry past MaxAttempts by rescue, a cancel
	// of a running job at its attempt's end.
	t.Run("FreedByEveryEnd", func(t *testing.T) {
		st := newStore(t)
		ends := map[string]func(j *store.JobRecord){
			"Succeeded": func(j *store.JobRecord) {
				finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeSucceeded})
			},
			"Dead": func(j *store.JobRecord) {
				finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeDead, Error: "fatal"})
			},
			"CancelRequested": func(j *store.JobRecord) {
				control(t, st, j.ID, store.OpCancel)
				finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Error: "stopped"})
			},
			"Rescued": func(j *store.JobRecord) {
				waitUntilStoreTime(t, st, j.LeaseExpiresAt)
				_, err := st.RescueExpired(t.Context(), 10)
				require.NoError(t, err)
			},
		}
		for name, end := range ends {
			kind := "unique.ends." + name
			id := insertOne(t, st, kind, withMaxAttempts(1), withUnique("k", perKind))
			end(claimOnly(t, st, kind, id, shortLease))
			require.True(t, get(t, st, id).State.Final(), "%s: not final", name)
			next := insertResult(t, st, params(t, kind, notDue, withUnique("k", perKind)))
			require.False(t, next.Duplicate, "%s: the finished job still holds its key", name)
		}
	})

	t.Run("PeriodNextWindowFreesKey", func(t *testing.T) {
		st := newStore(t)
		first := makeJob(t, st, store.StateSucceeded, "unique.period", withUnique("k", secondly))
		// The first insert was at or before now; once the store clock is
		// in a later window, a new job may take the key, and the old one
		// stays as it was.
		next := (window(secondly, storeNow(t, st)) + 1) * int64(secondly.Period/time.Second)
		waitUntilStoreTime(t, st, time.Unix(next, 0).Add(-time.Microsecond))
		second := params(t, "unique.period", notDue, withUnique("k", secondly))
		require.Equal(t, store.InsertResult{ID: second.ID}, insertResult(t, st, second))
		requireUnchanged(t, st, first)
		// The new window's job holds the key against the next insert,
		// unless that insert is already in a third window.
		inOneWindow(t, st, secondly, func(a *require.Assertions, key string) {
			holder := insertOne(t, st, "unique.period2", withUnique(key, secondly))
			dup := params(t, "unique.period2", withUnique(key, secondly))
			a.Equal(store.InsertResult{ID: holder, Duplicate: true}, insertResult(t, st, dup))
		})
	})

	// Duplicates within one call: a row finds the keys of the rows before
	// it held in their scopes.
	t.Run("OneCall", func(t *testing.T) {
		for _, u := range []store.UniqueScope{perKind, global, yearly} {
			t.Run(scopeName(u), func(t *testing.T) {
				st := newStore(t)
				inOneWindow(t, st, u, func(a *require.Assertions, key string) {
					x1 := params(t, "unique.x", withUnique(key, u))
					y1 := params(t, "unique.y", withUnique(key, u))
					x2 := params(t, "unique.x", withUnique(key, u))
					y2 := params(t, "unique.y", withUnique(key, u))
					res, err := st.Insert(t.Context(), []store.InsertParams{x1, y1, x2, y2})
					require.NoError(t, err)
					want := []store.InsertResult{{ID: x1.ID}, {ID: y1.ID}, {ID: x1.ID, Duplicate: true}, {ID: y1.ID, Duplicate: true}}
					if u.Global {
						want[1], want[3] = store.InsertResult{ID: x1.ID, Duplicate: true}, store.InsertResult{ID: x1.ID, Duplicate: true}
					}
					a.Equal(want, res)
				})
			})
		}
	})

	t.Run("Concurrent", func(t *testing.T) { testUniqueConcurrent(t, newStore) })

	t.Run("RunNow", func(t *testing.T) { testUniqueRunNow(t, newStore) })

	t.Run("PrunedFreesKey", func(t *testing.T) {
		st := newStore(t)
		p := as[store.Pruner](t, st)
		old := makeJob(t, st, store.StateSucceeded, "unique.prune", withUnique("k", globalFinished))
		require.True(t, insertResult(t, st, params(t, "unique.prune", withUnique("k", globalFinished))).Duplicate)
		waitUntilStoreTime(t, st, old.FinishedAt)
		n, err := p.Prune(t.Context(), &store.PruneParams{Retention: 0, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		insertOne(t, st, "unique.prune", withUnique("k", globalFinished))
	})
}

// testUniqueConcurrent races inserts of one key, alone and within calls of
// several rows, from many goroutines: each scope's key gets exactly one
// job, and every caller learns its ID. A kind-scoped key raced from two
// kinds gets one job per kind.
func testUniqueConcurrent(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name  string
		scope store.UniqueScope
		kinds []string
	}{
		{"PerKind", perKind, []string{"unique.race"}},
		{"PerKindTwoKinds", perKind, []string{"unique.race.a", "unique.race.b"}},
		{"Global", global, []string{"unique.race.a", "unique.race.b"}},
		{"Finished", finished, []string{"unique.race"}},
		{"Period", yearly, []string{"unique.race.a", "unique.race.b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			inOneWindow(t, st, c.scope, func(a *require.Assertions, key string) {
				ctx := ctxTimeout(t)
				const n = 16
				// Odd goroutines insert the key after a row of their own
				// key, so that both a store's one-row and many-row paths
				// race.
				calls := make([][]store.InsertParams, n)
				for i := range calls {
					p := params(t, c.kinds[i%len(c.kinds)], notDue, withUnique(key, c.scope))
					if i%2 == 1 {
						own := params(t, "unique.race.own", notDue, withUnique(fmt.Sprintf("%s-own-%d", key, i), c.scope))
						calls[i] = []store.InsertParams{own, p}
					} else {
						calls[i] = []store.InsertParams{p}
					}
				}
				results := make([]store.InsertResult, n)
				errs := make([]error, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						<-start
						res, err := st.Insert(ctx, calls[i])
						errs[i] = err
						if err == nil && len(res) == len(calls[i]) {
							results[i] = res[len(res)-1]
						}
					})
				}
				close(start)
				wg.Wait()

				winners := map[string]uuid.UUID{} // by the key's space
				space := func(kind string) string {
					if c.scope.Global {
						return ""
					}
					return kind
				}
				for i := range n {
					require.NoError(t, errs[i], "insert %d", i)
					p := calls[i][len(calls[i])-1]
					if !results[i].Duplicate {
						_, seen := winners[space(p.Kind)]
						a.False(seen, "two inserts won the key in %q", space(p.Kind))
						require.Equal(t, p.ID, results[i].ID)
						winners[space(p.Kind)] = p.ID
					}
				}
				wantWinners := len(c.kinds)
				if c.scope.Global {
					wantWinners = 1
				}
				a.Len(winners, wantWinners, "one job per key space")
				for i := range n {
					p := calls[i][len(calls[i])-1]
					w := winners[space(p.Kind)]
					a.Equal(w, results[i].ID, "insert %d reported another holder", i)
					if p.ID != w {
						_, err := st.Get(t.Context(), p.ID)
						a.ErrorIs(err, store.ErrNotFound, "insert %d", i)
					}
				}
				for _, w := range winners {
					j := get(t, st, w)
					require.Equal(t, key, j.UniqueKey)
					require.Equal(t, c.scope, j.Unique)
				}
			})
		})
	}
}

// testUniqueRunNow checks OpRunNow of a dead or cancelled job, which
// reopens it: a job that gave its key up on ending takes it back, and
// fails with store.ErrWrongState, unchanged, when another job holds the
// key meanwhile; a job whose scope kept its key held needs nothing.
func testUniqueRunNow(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name  string
		state store.State
		scope store.UniqueScope
		// taker, when not empty, is the kind of a job inserted with the
		// same key and scope after the job ended; takerDup says whether
		// the ended job still held the key against it.
		taker    string
		takerDup bool
		// refused says whether RunNow fails: another job holds the key.
		refused bool
	}{
		{"DeadKeyFree", store.StateDead, perKind, "", false, false},
		{"DeadKeyTaken", store.StateDead, perKind, "unique.runnow", false, true},
		{"DeadKeyTakenInOtherKind", store.StateDead, perKind, "unique.runnow.other", false, false},
		{"CancelledKeyFree", store.StateCancelled, perKind, "", false, false},
		{"CancelledKeyTaken", store.StateCancelled, perKind, "unique.runnow", false, true},
		{"DeadGlobalKeyTakenByOtherKind", store.StateDead, global, "unique.runnow.other", false, true},
		{"DeadFinishedKeyKept", store.StateDead, finished, "unique.runnow", true, false},
		{"CancelledFinishedKeyTaken", store.StateCancelled, finished, "unique.runnow", false, true},
		{"DeadPeriodKeyKept", store.StateDead, yearly, "unique.runnow", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			inOneWindow(t, st, c.scope, func(a *require.Assertions, key string) {
				old := makeJob(t, st, c.state, "unique.runnow", withUnique(key, c.scope))
				if c.taker != "" {
					res := insertResult(t, st, params(t, c.taker, notDue, withUnique(key, c.scope)))
					a.Equal(c.takerDup, res.Duplicate, "the ended job holds its key")
				}
				before := get(t, st, old.ID)
				_, err := st.Control(t.Context(), old.ID, store.OpRunNow)
				if c.refused {
					a.ErrorIs(err, store.ErrWrongState, "run-now of a job whose key another job holds")
					a.Equal(normalized(before), normalized(get(t, st, old.ID)), "job changed")
					return
				}
				a.NoError(err)
				a.Equal(store.StateScheduled, get(t, st, old.ID).State)
				// The reopened job holds its key again.
				dup := params(t, "unique.runnow", withUnique(key, c.scope))
				a.Equal(store.InsertResult{ID: old.ID, Duplicate: true}, insertResult(t, st, dup))
			})
		})
	}
}
