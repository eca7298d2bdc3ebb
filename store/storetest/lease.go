package storetest

import (
	"testing"
	"time"

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
		}{
			{"StaleAfterRescueAndReclaim", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				stale, current := rescuedAndReclaimed(t, st, "lease.lost")
				return lease(stale), get(t, st, current.ID)
			}},
			{"StaleAfterRescue", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				id := insertOne(t, st, "lease.lost")
				j := claimOnly(t, st, "lease.lost", id, shortLease)
				waitUntilStoreTime(t, st, j.LeaseExpiresAt)
				rescued, err := st.RescueExpired(t.Context(), 10)
				require.NoError(t, err)
				require.Len(t, rescued, 1)
				return lease(j), get(t, st, id)
			}},
			{"Finished", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateRunning, "lease.lost")
				return lease(j), finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeSucceeded})
			}},
			{"Released", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateRunning, "lease.lost")
				return lease(j), finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRelease})
			}},
			{"WrongToken", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateRunning, "lease.lost")
				return store.Lease{ID: j.ID, Token: newID(t)}, j
			}},
			{"NilToken", func(t *testing.T, st store.Store) (store.Lease, *store.JobRecord) {
				j := makeJob(t, st, store.StateScheduled, "lease.lost")
				return store.Lease{ID: j.ID}, j
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				lost, before := c.make(t, st)
				held := makeJob(t, st, store.StateRunning, "lease.held")
				unknown := store.Lease{ID: newID(t), Token: newID(t)}

				res := extend(t, st, 2*time.Hour, lease(held), lost, unknown)
				require.ElementsMatch(t, []store.Lease{lost, unknown}, res.Lost)
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
		require.Empty(t, res.CancelRequested)
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
