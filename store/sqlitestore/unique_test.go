package sqlitestore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// manualClock is a store clock a test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// job returns valid params for a job of kind, due at once, with key in
// scope u when key is not empty.
func job(kind, key string, u store.UniqueScope) store.InsertParams {
	return store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: kind, Payload: []byte(`{}`),
		Priority: store.PriorityNormal, MaxAttempts: 1, UniqueKey: key, Unique: u}
}

// insertOne inserts p and returns its result.
func insertOne(t *testing.T, st store.Store, p store.InsertParams) store.InsertResult {
	t.Helper()
	res, err := st.Insert(t.Context(), []store.InsertParams{p})
	require.NoError(t, err)
	require.Len(t, res, 1)
	return res[0]
}

// end takes the job of kind id through a claim to outcome (or cancels it,
// for cancelled) and returns it as it is then.
func end(t *testing.T, st store.Store, kind string, id uuid.UUID, state store.State) *store.JobRecord {
	t.Helper()
	if state == store.StateCancelled {
		_, err := st.Control(t.Context(), id, store.OpCancel)
		require.NoError(t, err)
	} else {
		res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}}, Limit: 1, LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
		require.Equal(t, id, res.Jobs[0].ID)
		out := map[store.State]store.Outcome{store.StateSucceeded: store.OutcomeSucceeded, store.StateDead: store.OutcomeDead}[state]
		ok, err := st.Finish(t.Context(), []store.FinishParams{{Lease: store.Lease{ID: id, Token: res.Jobs[0].LeaseToken}, Outcome: out, Error: "e"}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, ok)
	}
	j, err := st.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, state, j.State)
	return j
}

// TestUniqueScope checks the unique-key scopes of store.UniqueScope: per
// kind by default, held only while live unless Finished, across kinds when
// Global, per time window with a Period, never by a cancelled job.
func TestUniqueScope(t *testing.T) {
	perKind := store.UniqueScope{}
	finished := store.UniqueScope{Finished: true}
	global := store.UniqueScope{Global: true}

	t.Run("PerKindByDefault", func(t *testing.T) {
		st := newStore(t)
		a := insertOne(t, st, job("a", "k", perKind))
		b := insertOne(t, st, job("b", "k", perKind))
		require.False(t, a.Duplicate)
		require.False(t, b.Duplicate, "another kind's job does not hold the key")
		dup := insertOne(t, st, job("a", "k", perKind))
		require.Equal(t, store.InsertResult{ID: a.ID, Duplicate: true}, dup)
		rec, err := st.Get(t.Context(), a.ID)
		require.NoError(t, err)
		require.Equal(t, perKind, rec.Unique)
	})

	t.Run("Global", func(t *testing.T) {
		st := newStore(t)
		a := insertOne(t, st, job("a", "k", global))
		require.Equal(t, store.InsertResult{ID: a.ID, Duplicate: true}, insertOne(t, st, job("b", "k", global)))
		require.False(t, insertOne(t, st, job("b", "k", perKind)).Duplicate, "the kind's scope is another scope")
		rec, err := st.Get(t.Context(), a.ID)
		require.NoError(t, err)
		require.Equal(t, global, rec.Unique)
	})

	// Where the key is after the holder ended in each final state.
	ends := []struct {
		scope store.UniqueScope
		state store.State
		held  bool
	}{
		{perKind, store.StateSucceeded, false},
		{perKind, store.StateDead, false},
		{perKind, store.StateCancelled, false},
		{finished, store.StateSucceeded, true},
		{finished, store.StateDead, true},
		{finished, store.StateCancelled, false},
		{global, store.StateSucceeded, false},
		{store.UniqueScope{Global: true, Finished: true}, store.StateDead, true},
	}
	for _, e := range ends {
		t.Run("After"+string(e.state)+"/"+scopeName(e.scope), func(t *testing.T) {
			st := newStore(t)
			first := insertOne(t, st, job("k", "key", e.scope))
			end(t, st, "k", first.ID, e.state)
			again := insertOne(t, st, job("k", "key", e.scope))
			require.Equal(t, e.held, again.Duplicate)
			if e.held {
				require.Equal(t, first.ID, again.ID)
			}
		})
	}

	t.Run("PrunedFinishedFreesKey", func(t *testing.T) {
		st := newStore(t)
		first := insertOne(t, st, job("k", "key", finished))
		j := end(t, st, "k", first.ID, store.StateSucceeded)
		waitPast(t, st, j.FinishedAt)
		n, err := st.Prune(t.Context(), &store.PruneParams{Retention: 0, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.False(t, insertOne(t, st, job("k", "key", finished)).Duplicate)
	})

	t.Run("Period", func(t *testing.T) {
		clock := &manualClock{now: time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)}
		st := newStore(t, sqlitestore.WithClock(clock.Now))
		hourly := store.UniqueScope{Period: time.Hour}
		first := insertOne(t, st, job("k", "key", hourly))
		end(t, st, "k", first.ID, store.StateSucceeded)
		clock.Add(59 * time.Minute)
		require.Equal(t, store.InsertResult{ID: first.ID, Duplicate: true}, insertOne(t, st, job("k", "key", hourly)),
			"a finished job holds its key within its window")
		clock.Add(time.Minute) // 11:00: the next window
		second := insertOne(t, st, job("k", "key", hourly))
		require.False(t, second.Duplicate)
		end(t, st, "k", second.ID, store.StateCancelled)
		third := insertOne(t, st, job("k", "key", hourly))
		require.False(t, third.Duplicate, "a cancelled job never holds its key")
		require.False(t, insertOne(t, st, job("k", "key", store.UniqueScope{Period: 2 * time.Hour})).Duplicate,
			"another period is another scope")
	})

	t.Run("RunNowTakesKeyBack", func(t *testing.T) {
		st := newStore(t)
		first := insertOne(t, st, job("k", "key", perKind))
		end(t, st, "k", first.ID, store.StateDead)
		// The dead job freed its key; run again, it takes it back.
		_, err := st.Control(t.Context(), first.ID, store.OpRunNow)
		require.NoError(t, err)
		require.Equal(t, store.InsertResult{ID: first.ID, Duplicate: true}, insertOne(t, st, job("k", "key", perKind)))
	})

	t.Run("RunNowRefusedWhileKeyTaken", func(t *testing.T) {
		for _, state := range []store.State{store.StateDead, store.StateCancelled} {
			t.Run(string(state), func(t *testing.T) {
				st := newStore(t)
				first := insertOne(t, st, job("k", "key", perKind))
				before := end(t, st, "k", first.ID, state)
				taker := insertOne(t, st, job("k", "key", perKind))
				require.False(t, taker.Duplicate)
				_, err := st.Control(t.Context(), first.ID, store.OpRunNow)
				require.ErrorIs(t, err, store.ErrWrongState)
				after, err := st.Get(t.Context(), first.ID)
				require.NoError(t, err)
				require.Equal(t, before, after, "a refused run-now changed the job")
				n, err := st.Bulk(t.Context(), &store.BulkParams{Op: store.BulkRunNow, Filter: store.JobFilter{IDs: []uuid.UUID{first.ID}}, Limit: 10})
				require.NoError(t, err)
				require.Zero(t, n, "Bulk run-now leaves a job whose key was taken alone")
			})
		}
	})

	t.Run("FollowUpsAndThenHaveNoKey", func(t *testing.T) {
		st := newStore(t)
		holder := insertOne(t, st, job("next", "key", perKind))
		parent := insertOne(t, st, job("p", "", perKind))
		res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "p", Limit: 1}}, Limit: 1, LeaseDuration: time.Hour})
		require.NoError(t, err)
		then := job("next", "key", perKind)
		ok, err := st.Finish(t.Context(), []store.FinishParams{{Lease: store.Lease{ID: parent.ID, Token: res.Jobs[0].LeaseToken},
			Outcome: store.OutcomeSucceeded, Then: []store.InsertParams{then}}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, ok)
		got, err := st.Get(t.Context(), then.ID)
		require.NoError(t, err)
		require.Empty(t, got.UniqueKey)
		require.NotEqual(t, holder.ID, got.ID)
	})
}

func scopeName(u store.UniqueScope) string {
	name := "kind"
	if u.Global {
		name = "global"
	}
	if u.Finished {
		name += "+finished"
	}
	return name
}

// waitPast waits until the store's clock is after tm.
func waitPast(t *testing.T, st store.Store, tm time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		now, err := st.Now(t.Context())
		return err == nil && now.After(tm)
	}, 5*time.Second, time.Millisecond)
}
