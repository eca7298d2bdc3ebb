package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testLease checks ExtendLeases.
func testLease(t *testing.T, newStore NewStoreFunc) {
	t.Run("PushesExpiry", func(t *testing.T) {
		st := newStore(t)
		a := makeJob(t, st, store.StateRunning, "lease.a")
		b := makeJob(t, st, store.StateRunning, "lease.b")
		steps := []time.Duration{2 * time.Hour, 30 * time.Second, 3 * time.Hour}
		for _, d := range steps {
			before := storeNow(t, st)
			res := extend(t, st, d, lease(a), lease(b))
			after := storeNow(t, st)
			require.Empty(t, res.Lost)
			require.Empty(t, res.CancelRequested)
			for _, j := range []*store.JobRecord{a, b} {
				got := get(t, st, j.ID)
				requireBetween(t, before.Add(d), after.Add(d), got.LeaseExpiresAt, "LeaseExpiresAt = store now + Duration")
				got.LeaseExpiresAt = j.LeaseExpiresAt
				requireSameRecord(t, j, got, "only the expiry changes")
			}
		}
	})

	t.Run("ExtendedLeaseIsNotRescued", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "lease")
		j := claimOnly(t, st, "lease", id, shortLease)
		res := extend(t, st, longLease, lease(j))
		require.Empty(t, res.Lost)
		waitUntilStoreTime(t, st, j.LeaseExpiresAt)
		rescued, err := st.RescueExpired(t.Context(), 100)
		require.NoError(t, err)
		require.Empty(t, rescued)
		got := get(t, st, id)
		require.Equal(t, store.StateRunning, got.State)
		require.Equal(t, j.LeaseToken, got.LeaseToken)
	})

	t.Run("ExpiredButNotRescuedIsHeld", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "lease")
		j := claimOnly(t, st, "lease", id, shortLease)
		waitUntilStoreTime(t, st, j.LeaseExpiresAt)
		res := extend(t, st, longLease, lease(j))
		require.Empty(t, res.Lost)
		requireTimeNear(t, storeNow(t, st).Add(longLease), get(t, st, id).LeaseExpiresAt, clockTolerance)
		rescue(t, st, 10, 0)
	})

	t.Run("Lost", func(t *testing.T) {
		cases := []struct {
			name string
			make func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord)
			// finished: the lease's own outcome ended the job, so it is
			// reported in Finished too.
			finished bool
		}{
			{"StaleAfterRescueAndReclaim", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				stale, current := rescuedAndReclaimed(t, st, "lease.lost")
				return lease(stale), get(t, st, current.ID)
			}, false},
			{"StaleAfterRescue", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				id := insertOne(t, st, "lease.lost")
				j := claimOnly(t, st, "lease.lost", id, shortLease)
				waitUntilStoreTime(t, st, j.LeaseExpiresAt)
				rescued, err := st.RescueExpired(t.Context(), 10)
				require.NoError(t, err)
				require.Len(t, rescued, 1)
				return lease(j), get(t, st, id)
			}, false},
			{"Finished", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateRunning, "lease.lost")
				return lease(j), finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeSucceeded})
			}, true},
			{"Released", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateRunning, "lease.lost")
				return lease(j), finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRelease})
			}, true},
			{"WrongToken", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateRunning, "lease.lost")
				return store.Lease{ID: j.ID, Token: newID(t)}, j
			}, false},
			{"NilToken", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateScheduled, "lease.lost")
				return store.Lease{ID: j.ID}, j
			}, false},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				lost, before := c.make(t, st)
				held := makeJob(t, st, store.StateRunning, "lease.held")
				unknown := store.Lease{ID: newID(t), Token: newID(t)}

				res := extend(t, st, 2*time.Hour, lease(held), lost, unknown)
				require.ElementsMatch(t, []store.Lease{lost, unknown}, res.Lost)
				if c.finished {
					require.Equal(t, []store.Lease{lost}, res.Finished, "the lease's own outcome ended the job")
				} else {
					require.Empty(t, res.Finished, "a lease taken over is not finished by its holder")
				}
				require.Empty(t, res.CancelRequested)
				requireUnchanged(t, st, before)
				requireTimeNear(t, storeNow(t, st).Add(2*time.Hour), get(t, st, held.ID).LeaseExpiresAt, clockTolerance)
			})
		}
	})

	t.Run("SameJobStaleAndCurrent", func(t *testing.T) {
		// A host may heartbeat the lease of an attempt whose outcome it is
		// still writing along with the same job's next attempt: only the
		// stale lease is lost, the current one is extended.
		staleFirst := func(stale, current store.Lease) []store.Lease { return []store.Lease{stale, current} }
		currentFirst := func(stale, current store.Lease) []store.Lease { return []store.Lease{current, stale} }
		cases := []struct {
			name     string
			order    func(stale, current store.Lease) []store.Lease
			requests []store.ControlOp // on the current attempt
			cancels  int               // leases reported with a cancel request: the current one, or none
		}{
			{"StaleFirst", staleFirst, nil, 0},
			{"CurrentFirst", currentFirst, nil, 0},
			{"CancelRequested", staleFirst, []store.ControlOp{store.OpCancel}, 1},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				stale, current := rescuedAndReclaimed(t, st, "lease.dup")
				for _, op := range c.requests {
					control(t, st, current.ID, op)
				}
				before := storeNow(t, st)
				res := extend(t, st, 2*time.Hour, c.order(lease(stale), lease(current))...)
				after := storeNow(t, st)
				require.Equal(t, []store.Lease{lease(stale)}, res.Lost)
				require.ElementsMatch(t, []store.Lease{lease(current)}[:c.cancels], res.CancelRequested)
				got := get(t, st, current.ID)
				require.Equal(t, current.LeaseToken, got.LeaseToken)
				requireBetween(t, before.Add(2*time.Hour), after.Add(2*time.Hour), got.LeaseExpiresAt, "the current lease is extended")
			})
		}
	})

	t.Run("CancelRequested", func(t *testing.T) {
		st := newStore(t)
		a := makeJob(t, st, store.StateRunning, "lease.a")
		b := makeJob(t, st, store.StateRunning, "lease.b")
		control(t, st, a.ID, store.OpCancel)

		res := extend(t, st, 2*time.Hour, lease(a), lease(b))
		require.Empty(t, res.Lost)
		require.Equal(t, []store.Lease{lease(a)}, res.CancelRequested)
		got := get(t, st, a.ID)
		require.Equal(t, store.StateRunning, got.State)
		require.True(t, got.CancelRequested)
		requireTimeNear(t, storeNow(t, st).Add(2*time.Hour), got.LeaseExpiresAt, clockTolerance, "a cancel-requested lease is still held and extended")

		// Reported again at every extension until the owner finishes it.
		res = extend(t, st, 2*time.Hour, lease(a))
		require.Equal(t, []store.Lease{lease(a)}, res.CancelRequested)
		finishOne(t, st, a, store.FinishParams{Outcome: store.OutcomeCancelled, Error: "cancelled"})
		res = extend(t, st, 2*time.Hour, lease(a))
		require.Equal(t, []store.Lease{lease(a)}, res.Lost)
		require.Equal(t, []store.Lease{lease(a)}, res.Finished)
		require.Empty(t, res.CancelRequested)
	})

	t.Run("FinishedByHolder", func(t *testing.T) {
		// An extension that runs after the holder's own outcome was
		// written (a handler's committed CompleteTx, before the handler
		// returned) must tell it apart from a lease taken over: the job
		// is reported in Lost and Finished, whatever the outcome, and
		// only for the lease that wrote it.
		outcomes := []store.FinishParams{
			{Outcome: store.OutcomeSucceeded},
			{Outcome: store.OutcomeRetry, Error: "boom", Delay: time.Hour},
			{Outcome: store.OutcomeDead, Error: "boom"},
			{Outcome: store.OutcomeSnooze, Delay: time.Hour},
			{Outcome: store.OutcomeRelease},
			{Outcome: store.OutcomeCancelled, Error: "cancelled"},
		}
		for _, p := range outcomes {
			t.Run(p.Outcome.String(), func(t *testing.T) {
				st := newStore(t)
				j := makeJob(t, st, store.StateRunning, "lease.finished")
				held := makeJob(t, st, store.StateRunning, "lease.held")
				got := finishOne(t, st, j, p)
				require.Equal(t, uuid.Nil, got.LeaseToken, "a finished job shows no lease token")
				other := store.Lease{ID: j.ID, Token: newID(t)}

				res := extend(t, st, 2*time.Hour, lease(j), lease(held), other)
				require.ElementsMatch(t, []store.Lease{lease(j), other}, res.Lost)
				require.Equal(t, []store.Lease{lease(j)}, res.Finished)
				requireUnchanged(t, st, got)
			})
		}
	})

	t.Run("FinishedThenRescuedAttempt", func(t *testing.T) {
		// The first attempt's lease finished the job (retry due at once);
		// the second attempt's lease is rescued: neither reads as
		// finished, since a job remembers the lease that ended it only
		// until it is claimed again.
		st := newStore(t)
		id := insertOne(t, st, "lease.again")
		first := claimOnly(t, st, "lease.again", id, longLease)
		finishOne(t, st, first, store.FinishParams{Outcome: store.OutcomeRetry, Error: "boom"})
		second := claimOnly(t, st, "lease.again", id, shortLease)
		waitUntilStoreTime(t, st, second.LeaseExpiresAt)
		rescued, err := st.RescueExpired(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, rescued, 1)

		res := extend(t, st, 2*time.Hour, lease(first), lease(second))
		require.ElementsMatch(t, []store.Lease{lease(first), lease(second)}, res.Lost)
		require.Empty(t, res.Finished)
	})

	t.Run("InvalidDuration", func(t *testing.T) {
		for _, d := range []time.Duration{0, -time.Second} {
			t.Run(d.String(), func(t *testing.T) {
				st := newStore(t)
				j := makeJob(t, st, store.StateRunning, "lease")
				_, err := st.ExtendLeases(t.Context(), &store.ExtendParams{Leases: []store.Lease{lease(j)}, Duration: d})
				require.ErrorIs(t, err, store.ErrInvalidParams)
				requireUnchanged(t, st, j)
			})
		}
	})
}

// extend extends leases by d and requires success.
func extend(t *testing.T, st store.Store, d time.Duration, leases ...store.Lease) *store.ExtendResult {
	t.Helper()
	res, err := st.ExtendLeases(t.Context(), &store.ExtendParams{Leases: leases, Duration: d})
	require.NoError(t, err)
	require.NotNil(t, res)
	return res
}
