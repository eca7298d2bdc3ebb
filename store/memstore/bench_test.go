package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// BenchmarkClaimFinish measures the whole life of 100,000 jobs per
// iteration: insert in batches of 1,000, then claim in batches of 100 and
// finish each batch as succeeded. It reports ns/job besides ns/op (one op is
// 100,000 jobs). The "future-1M" case runs the same with one million
// far-future jobs of the same kind and priority waiting in the store, to
// show that claims do not scan the backlog.
func BenchmarkClaimFinish(b *testing.B) {
	for _, bc := range []struct {
		name    string
		backlog int
	}{
		{"jobs-100k", 0},
		{"jobs-100k-future-1M", 1_000_000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchClaimFinish(b, bc.backlog)
		})
	}
}

func benchClaimFinish(b *testing.B, backlog int) {
	const (
		jobs       = 100_000
		insertSize = 1000
		claimSize  = 100
	)
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	for i := 0; i < backlog; i += insertSize {
		_, err := st.Insert(ctx, benchParams(insertSize, 24*time.Hour))
		if err != nil {
			b.Fatal(err)
		}
	}
	batches := make([][]store.InsertParams, 0, jobs/insertSize)
	cp := &store.ClaimParams{
		Owner:         "bench",
		Kinds:         []store.KindLimit{{Kind: "bench", Limit: claimSize}},
		Limit:         claimSize,
		LeaseDuration: time.Minute,
	}
	fps := make([]store.FinishParams, 0, claimSize)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		batches = batches[:0]
		for range jobs / insertSize {
			batches = append(batches, benchParams(insertSize, 0))
		}
		b.StartTimer()

		for _, ps := range batches {
			if _, err := st.Insert(ctx, ps); err != nil {
				b.Fatal(err)
			}
		}
		done := 0
		for done < jobs {
			res, err := st.Claim(ctx, cp)
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Jobs) == 0 {
				b.Fatalf("claimed nothing after %d jobs", done)
			}
			fps = fps[:0]
			for _, j := range res.Jobs {
				fps = append(fps, store.FinishParams{
					Lease:   store.Lease{ID: j.ID, Token: j.LeaseToken},
					Outcome: store.OutcomeSucceeded,
				})
			}
			ok, err := st.Finish(ctx, fps)
			if err != nil || !ok[0] {
				b.Fatal(err, ok)
			}
			done += len(res.Jobs)
		}

		// Drop the finished jobs so every iteration starts alike.
		b.StopTimer()
		if _, err := st.Prune(ctx, &store.PruneParams{Limit: jobs}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*jobs), "ns/job")
}

func benchParams(n int, delay time.Duration) []store.InsertParams {
	payload := []byte(`{"to":"someone@example.com","body":"hello"}`)
	ps := make([]store.InsertParams, n)
	for i := range ps {
		ps[i] = store.InsertParams{
			ID:          uuid.Must(uuid.NewV7()),
			Kind:        "bench",
			Payload:     payload,
			Priority:    store.PriorityNormal,
			Delay:       delay,
			MaxAttempts: 3,
		}
	}
	return ps
}
