package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/axsched/ax"
)

// runSustained schedules -rate delayed jobs a second for -sustained-for,
// delays uniform in [-sustained-min, -sustained-max), from this process
// (ScheduleMany every -sustained-batch-ms), while a worker process (this
// program re-executed, default Config) runs them. Every second it counts
// the jobs that are due but not started, to see whether the backlog grows.
func runSustained(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"rate": o.rate, "for": o.susFor.String(),
		"delays": fmt.Sprintf("%s–%s", o.susMin, o.susMax), "batch_ms": o.susBatchMS, "conns": connsParam(o.conns)})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	s, err := d.scheduler(0) // producer only: never started
	if err != nil {
		return nil, err
	}
	w, err := b.startWorker(ctx, d.dsn, 0, true, 0)
	if err != nil {
		return nil, err
	}
	defer w.kill()
	if err := w.start(); err != nil {
		return nil, err
	}

	// Backlog sampler: due (run_at <= now()) but not yet claimed.
	type backlogSample struct {
		at time.Duration
		n  int64
	}
	var samples []backlogSample
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan error, 1)
	begin := time.Now()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				sampled <- nil
				return
			case <-t.C:
			}
			n, err := d.count(sampleCtx, `SELECT count(*) FROM {jobs} WHERE kind = $1 AND priority = 2
				AND state IN ('scheduled', 'retrying') AND run_at <= now()`, noopKind)
			if err != nil && sampleCtx.Err() == nil {
				sampled <- err
				return
			}
			samples = append(samples, backlogSample{time.Since(begin), n})
		}
	}()

	cpu0 := cpuTotal()
	span := o.susMax - o.susMin
	total := int(float64(o.rate) * o.susFor.Seconds())
	tick := time.NewTicker(time.Duration(o.susBatchMS) * time.Millisecond)
	sent, lastReport := 0, time.Now()
	var reqs []ax.Request
	for sent < total {
		select {
		case <-ctx.Done():
			tick.Stop()
			stopSampling()
			return nil, ctx.Err()
		case <-tick.C:
		}
		due := min(int(float64(o.rate)*time.Since(begin).Seconds()), total)
		if due <= sent {
			continue
		}
		reqs = reqs[:0]
		for range due - sent {
			reqs = append(reqs, ax.Request{Kind: noopKind, Options: []ax.ScheduleOption{ax.In(o.susMin + rand.N(span))}})
		}
		if _, err := s.ScheduleMany(ctx, reqs); err != nil {
			tick.Stop()
			stopSampling()
			return nil, err
		}
		sent = due
		if time.Since(lastReport) > 5*time.Second {
			b.progressf("sustained: scheduled %d/%d, started %d", sent, total, w.progress.Load())
			lastReport = time.Now()
		}
	}
	tick.Stop()
	produced := time.Since(begin)
	producerCPU := cpuTotal() - cpu0

	done := make(chan struct{})
	go func() {
		defer close(done)
		for w.progress.Load() < int64(total) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	waitErr := b.waitFor(ctx, "sustained: started", done, w.progress.Load, int64(total), o.susMax+time.Minute)
	runFor := time.Since(begin)
	stopSampling()
	if err := <-sampled; err != nil {
		return nil, err
	}
	res, err := w.stop()
	if err != nil {
		return nil, err
	}
	if waitErr != nil {
		return nil, waitErr
	}
	lags := make(durations, len(res.LagsUS))
	for i, us := range res.LagsUS {
		lags[i] = time.Duration(us) * time.Microsecond
	}
	workerCPU := res.UserS + res.SysS

	r.add("jobs scheduled", float64(total), "jobs")
	r.add("achieved schedule rate", float64(total)/produced.Seconds(), "jobs/s")
	r.add("start lag avg", ms(lags.mean()), "ms")
	r.add("start lag p50", ms(lags.pct(50)), "ms")
	r.atMost("start lag p99", ms(lags.pct(99)), "ms", 50)
	r.add("start lag max", ms(lags.max()), "ms")
	r.check("started early", float64(res.EarlyCnt), "count", "= 0", res.EarlyCnt == 0)
	r.add("worker CPU (scheduler process)", 100*workerCPU/runFor.Seconds(), "% of a core")
	r.add("producer CPU (this process)", 100*producerCPU.Seconds()/produced.Seconds(), "% of a core")

	// Growth: the due-not-started count in the second half of the run is
	// well above the first half and above a 10 ms worth of jobs.
	var maxN, firstSum, secondSum int64
	var firstN, secondN int
	mid := runFor / 2
	t := table{Title: "due but not started (sampled each second, every 10th shown)", Columns: []string{"t", "jobs"}}
	for i, sm := range samples {
		maxN = max(maxN, sm.n)
		if sm.at < mid {
			firstSum, firstN = firstSum+sm.n, firstN+1
		} else {
			secondSum, secondN = secondSum+sm.n, secondN+1
		}
		if i%10 == 0 || i == len(samples)-1 {
			t.Rows = append(t.Rows, []string{fmt.Sprintf("%.0fs", sm.at.Seconds()), fmt.Sprint(sm.n)})
		}
	}
	firstMean := float64(firstSum) / float64(max(firstN, 1))
	secondMean := float64(secondSum) / float64(max(secondN, 1))
	grows := secondMean > 2*firstMean+float64(o.rate)/100
	r.add("backlog max (due, not started)", float64(maxN), "jobs")
	r.add("backlog mean, first half", firstMean, "jobs")
	r.add("backlog mean, second half", secondMean, "jobs")
	growth := 0.0
	if grows {
		growth = 1
	}
	r.check("backlog grows", growth, "bool", "= 0 (no)", !grows)
	r.Tables = append(r.Tables, t)
	r.note("the jobs run in a separate worker process (default Config); its CPU is user+sys over the whole run (%.0fs)", runFor.Seconds())
	r.note("backlog grows = second-half mean > 2 × first-half mean + rate/100")
	return r, nil
}
