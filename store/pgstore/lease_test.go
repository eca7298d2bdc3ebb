package pgstore_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestExtendSkipsRowsLockedByUserTx: a handler's transaction holds one
// job's row (an uncommitted CompleteTx, or any FOR UPDATE); the extension
// of the host's leases must not wait for it (issue 23, defect 2: it waited,
// the host's other leases lapsed, and another host ran their jobs again).
// The other leases are extended, the held one is neither extended nor
// reported lost; once the transaction commits the CompleteTx, the lease
// reads as finished by its holder (defect 3), and once it rolls back, the
// lease is held and extended again.
func TestExtendSkipsRowsLockedByUserTx(t *testing.T) {
	lockers := []struct {
		name string
		// lock takes the row of l in tx.
		lock func(t *testing.T, st *pgstore.Store, tx pgx.Tx, l store.Lease)
		// end ends tx; finished says whether it ended the job.
		end      func(tx pgx.Tx, ctx context.Context) error
		finished bool
	}{
		{"CompleteTxCommitted", completeIn, pgx.Tx.Commit, true},
		{"CompleteTxRolledBack", completeIn, pgx.Tx.Rollback, false},
		{"ForUpdate", func(t *testing.T, _ *pgstore.Store, tx pgx.Tx, l store.Lease) {
			_, err := tx.Exec(t.Context(), `SELECT 1 FROM ax.jobs WHERE id = $1 FOR UPDATE`, [16]byte(l.ID))
			require.NoError(t, err)
		}, pgx.Tx.Commit, false},
	}
	for _, c := range lockers {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxT(t)
			st, leases, tx := heldLeases(t, "extend.busy")
			busy, others := leases[1], []store.Lease{leases[0], leases[2]}
			c.lock(t, st, tx, busy)
			before := expiries(t, st, leases)

			// The deadline only turns a wait (the defect) into a failure.
			ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			res, err := st.ExtendLeases(ectx, &store.ExtendParams{Leases: leases, Duration: time.Hour})
			require.NoError(t, err, "the extension waited on the transaction's row lock")
			require.Empty(t, res.Lost, "a row locked by its handler's transaction is busy, not lost")
			require.Empty(t, res.Finished)
			after := expiries(t, st, leases)
			for _, l := range others {
				require.True(t, after[l].After(before[l]), "lease %s not extended", l.ID)
			}
			require.Equal(t, before[busy], after[busy], "the locked row was written")

			require.NoError(t, c.end(tx, ctx))
			res, err = st.ExtendLeases(ectx, &store.ExtendParams{Leases: leases, Duration: 2 * time.Hour})
			require.NoError(t, err)
			if c.finished {
				require.Equal(t, []store.Lease{busy}, res.Lost)
				require.Equal(t, []store.Lease{busy}, res.Finished, "the holder's own CompleteTx ended the job")
				return
			}
			require.Empty(t, res.Lost)
			require.True(t, expiries(t, st, leases)[busy].After(after[busy]), "the lease is extended once the lock is gone")
		})
	}
}

// TestFinishSkipsRowsLockedByUserTx: a Finish of several jobs, one of
// whose rows a transaction holds (its handler returned with its
// CompleteTx transaction still open), applies the others at once, then
// waits for the held one alone and applies or refuses it by what the
// transaction did: no outcome is lost, and the others do not queue
// behind the lock.
func TestFinishSkipsRowsLockedByUserTx(t *testing.T) {
	cases := []struct {
		name     string
		end      func(tx pgx.Tx, ctx context.Context) error
		state    store.State // of the held job in the end
		appliedB bool        // the Finish of the held job applied
	}{
		{"Committed", pgx.Tx.Commit, store.StateSucceeded, false},
		{"RolledBack", pgx.Tx.Rollback, store.StateRetrying, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxT(t)
			st, leases, tx := heldLeases(t, "finish.busy")
			busy := leases[1]
			completeIn(t, st, tx, busy)

			params := make([]store.FinishParams, len(leases))
			for i, l := range leases {
				params[i] = store.FinishParams{Lease: l, Outcome: store.OutcomeRetry, Error: "not committed", Delay: time.Hour}
			}
			type result struct {
				ok  []bool
				err error
			}
			done := make(chan result, 1)
			go func() {
				ok, err := st.Finish(ctx, params)
				done <- result{ok, err}
			}()
			// The other jobs' outcomes are written while the row is held.
			for _, l := range []store.Lease{leases[0], leases[2]} {
				require.Eventually(t, func() bool {
					j, err := st.Get(ctx, l.ID)
					return err == nil && j.State == store.StateRetrying
				}, 20*time.Second, 10*time.Millisecond, "the outcome of %s queued behind the held row", l.ID)
			}
			require.NoError(t, c.end(tx, ctx))
			r := <-done
			require.NoError(t, r.err)
			require.Equal(t, []bool{true, c.appliedB, true}, r.ok)
			j, err := st.Get(ctx, busy.ID)
			require.NoError(t, err)
			require.Equal(t, c.state, j.State)
		})
	}
}

// completeIn applies a success for l inside tx, as a handler's CompleteTx.
func completeIn(t *testing.T, st *pgstore.Store, tx pgx.Tx, l store.Lease) {
	t.Helper()
	ok, err := st.CompleteTx(t.Context(), tx, store.FinishParams{Lease: l, Outcome: store.OutcomeSucceeded})
	require.NoError(t, err)
	require.True(t, ok)
}

// claimN inserts and claims n jobs of kind with a one-minute lease and
// returns their leases in ID order.
// heldLeases returns a store on a fresh database, the leases of three
// claimed jobs of kind, and an open transaction (rolled back when t ends)
// for the test to lock one of them in.
func heldLeases(t *testing.T, kind string) (*pgstore.Store, []store.Lease, pgx.Tx) {
	t.Helper()
	ctx := ctxT(t)
	pool := pgtest.Pool(t)
	st, err := pgstore.New(ctx, pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	leases := claimN(t, st, kind, 3)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return st, leases, tx
}

func claimN(t *testing.T, st *pgstore.Store, kind string, n int) []store.Lease {
	t.Helper()
	params := make([]store.InsertParams, n)
	for i := range params {
		params[i] = job(kind)
	}
	_, err := st.Insert(t.Context(), params)
	require.NoError(t, err)
	res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "host", Kinds: []store.KindLimit{{Kind: kind, Limit: n}}, Limit: n, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, res.Jobs, n)
	leases := make([]store.Lease, n)
	for i, j := range res.Jobs {
		leases[i] = store.Lease{ID: j.ID, Token: j.LeaseToken}
	}
	slices.SortFunc(leases, func(a, b store.Lease) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return leases
}

// expiries reads the lease expiry of each lease's job.
func expiries(t *testing.T, st *pgstore.Store, leases []store.Lease) map[store.Lease]time.Time {
	t.Helper()
	m := make(map[store.Lease]time.Time, len(leases))
	for _, l := range leases {
		j, err := st.Get(t.Context(), l.ID)
		require.NoError(t, err)
		m[l] = j.LeaseExpiresAt
	}
	return m
}
