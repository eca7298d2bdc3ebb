package pgstore_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestBulkRunNowIsSetBased checks that Bulk's run-now still finds the
// guard of Control's run-now statement it widens to an array of IDs:
// otherwise it falls back to one run per job, correct but several times
// slower.
func TestBulkRunNowIsSetBased(t *testing.T) {
	t.Parallel()
	if !newStore(t).BulkRunNowIsSetBased() {
		t.Fatal("Control's run-now statement no longer selects its job with `WHERE id = $1 AND`: update runNowOneGuard in bulk.go")
	}
}

// TestBulkRunNowEach runs the same bulk retry of cancelled jobs, one of
// whose keys another job took meanwhile, set-based (Bulk) and with the
// per-job fallback, and checks that both change the same jobs the same
// way.
func TestBulkRunNowEach(t *testing.T) {
	t.Parallel()
	type bulkFunc func(*pgstore.Store, context.Context, *store.BulkParams) (int, error)
	run := func(t *testing.T, bulk bulkFunc) []*store.JobRecord {
		ctx := ctxT(t)
		s := newStore(t)
		var ps []store.InsertParams
		for i := range 4 {
			p := job("bulk.each")
			if i < 2 {
				p.UniqueKey = "bulk-each-" + string(rune('a'+i))
			}
			ps = append(ps, p)
		}
		if _, err := s.Insert(ctx, ps); err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if _, err := s.Control(ctx, p.ID, store.OpCancel); err != nil {
				t.Fatal(err)
			}
		}
		taker := job("bulk.each")
		taker.UniqueKey = ps[0].UniqueKey
		if _, err := s.Insert(ctx, []store.InsertParams{taker}); err != nil {
			t.Fatal(err)
		}
		ids := []uuid.UUID{ps[0].ID, ps[1].ID, ps[2].ID, ps[3].ID}
		n, err := bulk(s, ctx, &store.BulkParams{Op: store.BulkRunNow, Filter: store.JobFilter{IDs: ids}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Fatalf("changed %d jobs, want 3 (the one whose key was taken left alone)", n)
		}
		var out []*store.JobRecord
		for _, id := range ids {
			j, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, j)
		}
		return out
	}
	set := run(t, (*pgstore.Store).Bulk)
	each := run(t, (*pgstore.Store).BulkRunNowEach)
	for i := range set {
		a, b := set[i], each[i]
		if a.State != b.State || a.Attempt != b.Attempt || a.MaxAttempts != b.MaxAttempts || a.FinishedAt.IsZero() != b.FinishedAt.IsZero() {
			t.Errorf("job %d: set-based %s attempt %d/%d, per job %s attempt %d/%d", i,
				a.State, a.Attempt, a.MaxAttempts, b.State, b.Attempt, b.MaxAttempts)
		}
	}
	if set[0].State != store.StateCancelled || set[1].State != store.StateScheduled {
		t.Errorf("states %s, %s: want the taken key's job cancelled, the others scheduled", set[0].State, set[1].State)
	}
}
