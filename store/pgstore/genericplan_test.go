package pgstore_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestHotPathRunsOnGenericPlans: the claim and the statements that write
// outcomes (Finish, FinishFlow) run on their generic plans from their
// first execution, whatever the batch sizes: PostgreSQL left alone makes
// custom plans for the first five executions on a connection and, for
// these statements, often for every one after (the generic plan's
// estimate is above the custom ones'), planning the whole statement each
// time. One connection, so that its pg_prepared_statements counts every
// execution.
func TestHotPathRunsOnGenericPlans(t *testing.T) {
	t.Parallel()
	sizes := []int{1, 7, 2, 20, 1, 3, 12, 4}
	for _, way := range []string{"Finish", "FinishFlow"} {
		t.Run(way, func(t *testing.T) {
			t.Parallel()
			pool, s := oneConnStore(t)
			ctx := ctxT(t)
			total := 0
			for _, n := range sizes {
				total += n
			}
			jobs := make([]store.InsertParams, total)
			for i := range jobs {
				jobs[i] = job("gp")
			}
			if _, err := s.Insert(ctx, jobs); err != nil {
				t.Fatal(err)
			}
			for _, n := range sizes {
				res, err := s.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "gp", Limit: n}},
					Limit: n, LeaseDuration: time.Minute})
				if err != nil || len(res.Jobs) != n {
					t.Fatalf("claim of %d: %d jobs, %v", n, len(res.Jobs), err)
				}
				params := make([]store.FinishParams, n)
				for i, j := range res.Jobs {
					params[i] = store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeSucceeded}
				}
				if way == "Finish" {
					_, err = s.Finish(ctx, params)
				} else {
					_, err = s.FinishFlow(ctx, params)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			sqls := s.BatchSQL()
			finish := sqls["finish"]
			if way == "FinishFlow" {
				finish = sqls["flowFinish"]
			}
			for name, sql := range map[string]string{"claim": sqls["claimOne"], way: finish} {
				var generic, custom int64
				err := pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
					FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&generic, &custom)
				if err != nil {
					t.Fatal(err)
				}
				if custom != 0 || generic != int64(len(sizes)) {
					t.Errorf("%s: %d generic and %d custom plans of %d executions, want every one generic", name, generic, custom, len(sizes))
				}
			}
		})
	}
}

// TestCompleteTxLeavesTheCallersPlans: an outcome written in the caller's
// transaction (CompleteTx) does not force generic plans on what the
// caller runs after it in that transaction.
func TestCompleteTxLeavesTheCallersPlans(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.DSN(t))
	s, err := pgstore.New(ctxT(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	if _, err := s.Insert(ctx, []store.InsertParams{job("tx")}); err != nil {
		t.Fatal(err)
	}
	lease := claimOne(t, s, "tx")
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ok, err := s.CompleteTx(ctx, tx, store.FinishParams{Lease: lease, Outcome: store.OutcomeSucceeded})
		if err != nil || !ok {
			t.Fatalf("CompleteTx: %v, %v", ok, err)
		}
		var mode string
		if err := tx.QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil {
			return err
		}
		if mode != "auto" {
			t.Errorf("plan_cache_mode in the caller's transaction after CompleteTx: %q, want auto", mode)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
