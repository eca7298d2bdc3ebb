package pgstore_test

import (
	"testing"
	"time"

	"github.com/axsched/ax/store"
)

func TestSmoke(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t)
	p := job("a")
	p.Metadata = map[string]string{"trace": "x"}
	res, err := s.Insert(ctx, []store.InsertParams{p})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	many := []store.InsertParams{job("a"), job("b"), job("a")}
	many[0].UniqueKey = "k1"
	many[2].UniqueKey = "k1"
	res, err = s.Insert(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	cr, err := s.Claim(ctx, &store.ClaimParams{Owner: "n1", Kinds: []store.KindLimit{{"a", 10}, {"b", 10}}, Limit: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("now %v next %v jobs %d", cr.Now, cr.NextRunAt, len(cr.Jobs))
	for _, j := range cr.Jobs {
		t.Logf("%+v", *j)
	}
	var fp []store.FinishParams
	for i, j := range cr.Jobs {
		fp = append(fp, store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.Outcome(i%3 + 1), Delay: time.Second, Error: "boom"})
	}
	ok, err := s.Finish(ctx, fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(ok)
	for _, j := range cr.Jobs {
		g, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", *g)
	}
	counts, err := s.CountJobs(ctx)
	t.Log(counts, err)
}
