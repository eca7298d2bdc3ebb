package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// BenchmarkInsert inserts jobs in calls of 1,000.
func BenchmarkInsert(b *testing.B) {
	st := benchStore(b)
	ps := make([]store.InsertParams, 1000)
	b.ResetTimer()
	for b.Loop() {
		for i := range ps {
			ps[i] = job("k", "", store.UniqueScope{})
		}
		if _, err := st.Insert(b.Context(), ps); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ps))/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkClaimFinish claims and finishes jobs 100 at a time: the plain
// claim, and the flow claim a Scheduler's default priority aging (a
// minute) makes.
func BenchmarkClaimFinish(b *testing.B) {
	for _, bc := range []struct {
		name  string
		aging time.Duration
	}{{"plain", 0}, {"aging", time.Minute}} {
		b.Run(bc.name, func(b *testing.B) { benchClaimFinish(b, bc.aging) })
	}
}

func benchClaimFinish(b *testing.B, aging time.Duration) {
	st := benchStore(b)
	ps := make([]store.InsertParams, 100)
	claim := &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "k", Limit: 100}}, Limit: 100,
		LeaseDuration: time.Minute, AgeAfter: aging}
	fps := make([]store.FinishParams, 0, 100)
	for b.Loop() {
		b.StopTimer()
		for i := range ps {
			ps[i] = job("k", "", store.UniqueScope{})
		}
		if _, err := st.Insert(b.Context(), ps); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := st.Claim(b.Context(), claim)
		if err != nil || len(res.Jobs) != 100 {
			b.Fatal(err, len(res.Jobs))
		}
		fps = fps[:0]
		for _, j := range res.Jobs {
			fps = append(fps, store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeSucceeded})
		}
		if _, err := st.Finish(b.Context(), fps); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "jobs/s")
}

func benchStore(b *testing.B) *sqlitestore.Store {
	st, err := sqlitestore.Open(b.Context(), b.TempDir()+"/b.db", sqlitestore.WithSyncNormal())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}
