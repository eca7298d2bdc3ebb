package axprom_test

import (
	"context"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axalert"
	"github.com/axsched/ax/axprom"
	"github.com/axsched/ax/axstats"
	"github.com/axsched/ax/store/memstore"
)

// BenchmarkObservabilityOverhead runs 50k no-op jobs with 100 workers on
// memstore (insert excluded, as in BenchmarkThroughputMemstore), with
// observability off (no logger, no observer) and on (a zap production
// logger at info level writing JSON to io.Discard, an axprom Collector
// registered and attached, a StatsObserver and an Alerter at their
// defaults), and reports jobs/s, the process CPU time per job and the
// events dropped per run.
//
//	go test -run '^$' -bench ObservabilityOverhead -benchtime 5x -count 6 ./axprom
func BenchmarkObservabilityOverhead(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchThroughput(b, false) })
	b.Run("on", func(b *testing.B) { benchThroughput(b, true) })
}

func benchThroughput(b *testing.B, on bool) {
	const jobs = 50_000
	var dropped int64
	var elapsed, cpu time.Duration
	for range b.N {
		b.StopTimer()
		st := memstore.New()
		cfg := ax.Config{Store: st, Workers: 100}
		var c *axprom.Collector
		if on {
			core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel)
			cfg.Logger = zap.New(core)
			c = axprom.New(axprom.Options{})
			cfg.Observers = []ax.Observer{c, axstats.New(axstats.Config{}), axalert.New(axalert.Config{}, func(axalert.Alert) {})}
		}
		s, err := ax.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if on {
			c.Attach(s)
			prometheus.NewRegistry().MustRegister(c)
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
		start, cpuStart := time.Now(), cpuTime()
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		<-done
		if err := s.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		cpu += cpuTime() - cpuStart
		dropped += s.DroppedEvents()
	}
	b.ReportMetric(float64(jobs*b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(jobs*b.N), "cpu-ns/job")
	b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
}

// cpuTime returns the CPU time (user and system) the process used so far.
// It is steadier than throughput on a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
