package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/axsched/ax"
)

// runLag schedules -lag-jobs jobs (one ScheduleMany, COPY) due uniformly
// between -lag-min and -lag-max ahead, with ax.At on the host clock and a
// Scheduler already running, and reports their start lag two ways,
// overall and by offset:
//
//   - host clock: the handler's first instruction (time.Now()) minus the
//     job's run time, which for ax.At(t) is t itself: what a user waiting
//     for the job sees, including the wake-up, claim and dispatch;
//   - store clock: Job.StartedAt − Job.RunAt (Job.ClaimLag), the claim's
//     now() minus run_at, both the database's; zero for a job claimed
//     ahead of its run_at (ClaimParams.Ahead), whose StartedAt is its
//     run_at. The host-clock figure is then the one that can show an
//     early start: it must be none.
//
// The two clocks are the same machine's when the server is local (the
// shared server and -private are), so the difference between the figures
// is the time from the claim's now() to the handler.
//
// The default offsets span a minute, long enough for pgx's prepared
// statements to be on generic plans after PostgreSQL's first five
// executions.
func runLag(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"jobs": o.lagJobs, "offsets": fmt.Sprintf("%s–%s", o.lagMin, o.lagMax), "conns": connsParam(o.conns), "async commits": o.asyncCommits})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	ts := newTimedStore(d.store) // the scheduler's claims, for claimFigures
	s, err := d.scheduler(0, func(c *ax.Config) { c.Store = ts })
	if err != nil {
		return nil, err
	}
	type sample struct{ host, store, offset time.Duration }
	var (
		mu      sync.Mutex
		samples = make([]sample, 0, o.lagJobs)
		base    time.Time // host time the offsets count from, set before ScheduleMany
	)
	c := newCounter(o.lagJobs)
	err = s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		ns, err := strconv.ParseInt(string(j.Payload), 10, 64)
		if err != nil {
			return ax.Permanent(fmt.Errorf("payload %q: %w", j.Payload, err))
		}
		at := time.Unix(0, ns)
		mu.Lock()
		samples = append(samples, sample{now.Sub(at), j.ClaimLag(), at.Sub(base)})
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
	base = time.Now()
	for i := range reqs {
		at := base.Add(o.lagMin + rand.N(span))
		reqs[i] = ax.Request{Kind: noopKind, Payload: json.RawMessage(strconv.FormatInt(at.UnixNano(), 10)),
			Options: []ax.ScheduleOption{ax.At(at)}}
	}
	if _, err := s.ScheduleMany(ctx, reqs); err != nil {
		_ = stopScheduler(s)
		return nil, err
	}
	b.progressf("lag: %d jobs scheduled in %.1fs, due over the next %s", o.lagJobs, time.Since(base).Seconds(), o.lagMax)
	waitErr := b.wait(ctx, "lag", c, o.lagMax+time.Minute)
	stopErr := stopScheduler(s)
	if waitErr != nil {
		return nil, waitErr
	}
	if stopErr != nil {
		return nil, fmt.Errorf("stop: %w", stopErr)
	}

	var host, store durations
	hostEarly, storeEarly := 0, 0
	bucket := max(time.Second, (span / 12).Round(time.Second))
	byOffset := map[int][2]durations{}
	for _, sm := range samples {
		host = append(host, sm.host)
		store = append(store, sm.store)
		if sm.host < 0 {
			hostEarly++
		}
		if sm.store < 0 {
			storeEarly++
		}
		k := int(sm.offset / bucket)
		v := byOffset[k]
		v[0], v[1] = append(v[0], sm.host), append(v[1], sm.store)
		byOffset[k] = v
	}
	r.add("start lag, host clock, p50", ms(host.pct(50)), "ms")
	r.add("start lag, host clock, p90", ms(host.pct(90)), "ms")
	r.atMost("start lag, host clock, p99", ms(host.pct(99)), "ms", 5)
	r.add("start lag, host clock, max", ms(host.max()), "ms")
	r.add("start lag, store clock, p50", ms(store.pct(50)), "ms")
	r.add("start lag, store clock, p90", ms(store.pct(90)), "ms")
	r.atMost("start lag, store clock, p99", ms(store.pct(99)), "ms", 5)
	r.add("start lag, store clock, max", ms(store.max()), "ms")
	r.check("started early (store clock)", float64(storeEarly), "count", "= 0", storeEarly == 0)
	r.check("started early (host clock)", float64(hostEarly), "count", "= 0", hostEarly == 0)
	claimFigures(r, ts)
	t := table{Title: "start lag (ms) by offset, host clock | store clock",
		Columns: []string{"offset", "jobs", "host p50", "host p99", "host max", "store p50", "store p99", "store max"}}
	for k := int(o.lagMin / bucket); k <= int(o.lagMax/bucket); k++ {
		v, ok := byOffset[k]
		if !ok {
			continue
		}
		h, st := v[0], v[1]
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%s–%s", time.Duration(k)*bucket, time.Duration(k+1)*bucket), fmt.Sprint(len(h)),
			fmt.Sprintf("%.2f", ms(h.pct(50))), fmt.Sprintf("%.2f", ms(h.pct(99))), fmt.Sprintf("%.2f", ms(h.max())),
			fmt.Sprintf("%.2f", ms(st.pct(50))), fmt.Sprintf("%.2f", ms(st.pct(99))), fmt.Sprintf("%.2f", ms(st.max()))})
	}
	r.Tables = append(r.Tables, t)
	r.note("host clock: handler start (time.Now()) minus t of ax.At(t); store clock: Job.StartedAt − Job.RunAt (the claim's now() minus run_at; zero for a job claimed ahead, whose StartedAt is its run_at)")
	return r, nil
}
