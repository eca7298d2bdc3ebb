package e2e_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// onetxCitusCalls are the Citus store's methods that take a caller's
// transaction, as onetxStoreCalls are pgstore's.
var onetxCitusCalls = map[string]struct {
	prepare func(t *testing.T, st *pgstore.CitusStore) store.Lease
	call    func(ctx context.Context, st *pgstore.CitusStore, tx pgx.Tx, lease store.Lease) error
}{
	"CitusStore.InsertTx": {nil, func(ctx context.Context, st *pgstore.CitusStore, tx pgx.Tx, _ store.Lease) error {
		_, err := st.InsertTx(ctx, tx, citusJobs(8))
		return err
	}},
	"CitusStore.CompleteTx": {citusClaimed, func(ctx context.Context, st *pgstore.CitusStore, tx pgx.Tx, lease store.Lease) error {
		ok, err := st.CompleteTx(ctx, tx, store.FinishParams{Lease: lease, Outcome: store.OutcomeSucceeded})
		if err == nil && !ok {
			err = errors.New("lease lost")
		}
		return err
	}},
}

// citusJobs returns n due jobs, every other one with a unique key (placed
// by the key: the job_ids path).
func citusJobs(n int) []store.InsertParams {
	jobs := make([]store.InsertParams, n)
	for i := range jobs {
		jobs[i] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "onetx", Payload: []byte(`{}`),
			Priority: store.PriorityNormal, MaxAttempts: 3}
		if i%2 == 1 {
			jobs[i].UniqueKey = uuid.NewString()
		}
	}
	return jobs
}

// citusClaimed inserts a job and claims it.
func citusClaimed(t *testing.T, st *pgstore.CitusStore) store.Lease {
	t.Helper()
	_, err := st.Insert(t.Context(), citusJobs(1))
	require.NoError(t, err)
	res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: "onetx", Limit: 1}},
		Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	return store.Lease{ID: res.Jobs[0].ID, Token: res.Jobs[0].LeaseToken}
}

// TestOneTxCitusStore is TestOneTxStore for the Citus store: its methods
// that take a caller's transaction, on a pool of one connection to the
// coordinator and a cold store, acquire no second connection while the
// transaction is open.
func TestOneTxCitusStore(t *testing.T) {
	admin, schema := citustest.Schema(t)
	require.NoError(t, pgstore.MigrateCitus(t.Context(), admin, pgstore.WithSchema(schema), pgstore.WithCitusShards(4)))
	names := make([]string, 0, len(onetxCitusCalls))
	for name := range onetxCitusCalls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := onetxCitusCalls[name]
		t.Run(name, func(t *testing.T) {
			pool, g := guardedPool(t, citustest.URL())
			open := func() *pgstore.CitusStore {
				st, err := pgstore.NewCitus(t.Context(), pool, pgstore.WithSchema(schema))
				require.NoError(t, err)
				t.Cleanup(func() { _ = st.Close() })
				return st
			}
			st := open()
			var lease store.Lease
			if c.prepare != nil {
				lease = c.prepare(t, st)
				st = open() // cold again
			}
			inGuardedTx(t, pool, g, func(ctx context.Context, tx pgx.Tx) error { return c.call(ctx, st, tx, lease) })
		})
	}
}
