package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/axsched/ax"
)

// runLag schedules -lag-jobs jobs (one ScheduleMany, COPY) due uniformly
// between -lag-min and -lag-max ahead, with a Scheduler already running,
// and reports their start lag (Job.StartLag: claim time minus run_at, both
// in the store's clock), overall and per second of offset.
func runLag(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"jobs": o.lagJobs, "offsets": fmt.Sprintf("%s–%s", o.lagMin, o.lagMax), "conns": connsParam(o.conns)})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	s, err := d.scheduler(0)
	if err != nil {
		return nil, err
	}
	type sample struct{ lag, offset time.Duration }
	var (
		mu      sync.Mutex
		samples = make([]sample, 0, o.lagJobs)
	)
	c := newCounter(o.lagJobs)
	err = s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		mu.Lock()
		samples = append(samples, sample{j.ClaimLag(), j.RunAt.Sub(j.CreatedAt)})
		mu.Unlock()
		c.inc()
		return nil
	}))
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	reqs := make([]ax.Request, o.lagJobs)
	span := o.lagMax - o.lagMin
	for i := range reqs {
		reqs[i] = ax.Request{Kind: noopKind, Options: []ax.ScheduleOption{ax.In(o.lagMin + rand.N(span))}}
	}
	if _, err := s.ScheduleMany(ctx, reqs); err != nil {
		_ = stopScheduler(s)
		return nil, err
	}
	waitErr := b.wait(ctx, "lag", c, o.lagMax+time.Minute)
	stopErr := stopScheduler(s)
	if waitErr != nil {
		return nil, waitErr
	}
	if stopErr != nil {
		return nil, fmt.Errorf("stop: %w", stopErr)
	}

	var all durations
	early := 0
	bySecond := map[int]durations{}
	for _, sm := range samples {
		all = append(all, sm.lag)
		if sm.lag < 0 {
			early++
		}
		sec := int(sm.offset / time.Second)
		bySecond[sec] = append(bySecond[sec], sm.lag)
	}
	r.add("start lag p50", ms(all.pct(50)), "ms")
	r.add("start lag p90", ms(all.pct(90)), "ms")
	r.atMost("start lag p99", ms(all.pct(99)), "ms", 5)
	r.add("start lag max", ms(all.max()), "ms")
	r.check("started early", float64(early), "count", "= 0", early == 0)
	t := table{Title: "start lag (ms) by offset", Columns: []string{"offset", "jobs", "p50", "p90", "p99", "max"}}
	for sec := int(o.lagMin / time.Second); sec <= int(o.lagMax/time.Second); sec++ {
		lags, ok := bySecond[sec]
		if !ok {
			continue
		}
		t.Rows = append(t.Rows, append([]string{fmt.Sprintf("%d–%ds", sec, sec+1), fmt.Sprint(len(lags))}, lags.msCells()...))
	}
	r.Tables = append(r.Tables, t)
	r.note("start lag is Job.ClaimLag(): the claim's now() minus run_at, in the store's clock")
	return r, nil
}
