package ax_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// BenchmarkThroughputMemstore measures no-op jobs per second through the
// whole scheduler (insert excluded) with 100 workers on memstore.
//
//	go test -run '^$' -bench ThroughputMemstore -benchtime 5x .
func BenchmarkThroughputMemstore(b *testing.B) {
	const jobs = 100_000
	for range b.N {
		b.StopTimer()
		st := memstore.New()
		s, err := ax.New(ax.Config{Store: st, Workers: 100})
		if err != nil {
			b.Fatal(err)
		}
		var left atomic.Int64
		left.Store(jobs)
		done := make(chan struct{})
		_ = s.Handle("noop", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			if left.Add(-1) == 0 {
				close(done)
			}
			return nil
		}))
		reqs := make([]ax.Request, jobs)
		for i := range reqs {
			reqs[i] = ax.Request{Kind: "noop"}
		}
		if _, err := s.ScheduleMany(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		<-done
		if err := s.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(jobs)/time.Since(start).Seconds(), "jobs/s")
	}
}

// BenchmarkStartLagMemstore schedules 10k jobs spread over 5 s and reports
// the start lag (start minus run_at, in the store's clock) percentiles.
//
//	go test -run '^$' -bench StartLagMemstore -benchtime 1x .
func BenchmarkStartLagMemstore(b *testing.B) {
	const jobs, spread = 10_000, 5 * time.Second
	for range b.N {
		st := memstore.New()
		s, err := ax.New(ax.Config{Store: st})
		if err != nil {
			b.Fatal(err)
		}
		lags := make(chan time.Duration, jobs)
		_ = s.Handle("noop", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			lags <- j.ClaimLag()
			return nil
		}))
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		reqs := make([]ax.Request, jobs)
		for i := range reqs {
			delay := time.Second + time.Duration(i)*spread/jobs
			reqs[i] = ax.Request{Kind: "noop", Options: []ax.ScheduleOption{ax.In(delay)}}
		}
		if _, err := s.ScheduleMany(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
		all := make([]time.Duration, 0, jobs)
		for range jobs {
			all = append(all, <-lags)
		}
		if err := s.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		slices.Sort(all)
		b.ReportMetric(float64(all[jobs/2])/1e6, "p50-ms")
		b.ReportMetric(float64(all[jobs*99/100])/1e6, "p99-ms")
		b.ReportMetric(float64(all[jobs-1])/1e6, "max-ms")
	}
}
