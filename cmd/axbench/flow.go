package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/axsched/ax/store"
)

// runFlow measures flow control (issue 13) over -procs worker processes:
//
//   - overhead: no-op jobs/s with a GlobalConcurrency and with a RateLimit
//     set high enough not to bind, against none, at each -workers value
//     (target: at most 10% slower). Each configuration runs -flow-reps
//     times, interleaved, and its median counts, since one run on a shared
//     machine varies by more than the 10% measured.
//   - rate-limit release: a backlog drained by RateLimit(-flow-rate, 1s);
//     each start's lag after the moment the bucket allowed it, replayed
//     from the claims' store times with the bucket's own rules
//     (store.RateLimit); target p99 ≤ 50 ms.
//   - breaker release: jobs held by an open breaker; the lag of their
//     starts after the breaker closes (CloseBreaker); target p99 ≤ 50 ms.
func runFlow(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"n": o.n, "procs": o.procs, "workers": o.workers, "reps": o.flowReps,
		"rate": o.flowRate, "lag_jobs": o.flowLagJobs, "conns": connsParam(o.conns)})
	tbl := table{Title: "no-op jobs/s per configuration (median of the reps), and against none",
		Columns: []string{"workers/proc", "flow", "jobs/s", "runs", "vs none"}}
	for _, w := range o.workerList {
		modes := []struct {
			name string
			fl   workerFlow
		}{
			{"none", workerFlow{}},
			{fmt.Sprintf("GlobalConcurrency(%d)", 10*o.procs*w), workerFlow{global: 10 * o.procs * w}},
			{"RateLimit(1000000, 1s)", workerFlow{rate: 1_000_000, ratePer: time.Second}},
		}
		runs := make([][]float64, len(modes))
		for range max(o.flowReps, 1) {
			for i, m := range modes {
				rate, err := flowThroughput(ctx, b, w, m.fl)
				if err != nil {
					return nil, fmt.Errorf("%s at W=%d: %w", m.name, w, err)
				}
				runs[i] = append(runs[i], rate)
			}
		}
		base := median(runs[0])
		for i, m := range modes {
			med := median(runs[i])
			row := []string{fmt.Sprint(w), m.name, fmt.Sprintf("%.0f", med), fmtRuns(runs[i]), fmt.Sprintf("%.3f", med/base)}
			tbl.Rows = append(tbl.Rows, row)
			if i > 0 {
				r.atLeast(fmt.Sprintf("%s vs none, W=%d ×%d procs", m.name, w, o.procs), med/base, "ratio", 0.9)
			}
		}
	}
	r.Tables = append(r.Tables, tbl)

	rl, err := flowRateLag(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("rate-limit lag: %w", err)
	}
	r.add(fmt.Sprintf("RateLimit(%d, 1s): starts/s draining the backlog", o.flowRate), rl.rate, "jobs/s")
	r.add("RateLimit: most starts in any sliding second (store clock)", float64(rl.worst), "count")
	r.add("RateLimit: claim lag after allowed p50 (store clock)", ms(rl.claim.p50), "ms")
	r.add("RateLimit: claim lag after allowed p99 (store clock)", ms(rl.claim.p99), "ms")
	r.atMost("RateLimit: start lag after allowed p99 (handler start)", ms(rl.start.p99), "ms", 50)
	r.add("RateLimit: start lag after allowed max", ms(rl.start.max), "ms")

	bl, err := flowBreakerLag(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("breaker lag: %w", err)
	}
	r.add(fmt.Sprintf("breaker: %d held jobs, claim lag after the close p50 (store clock)", o.flowBreakerJobs), ms(bl.claim.p50), "ms")
	r.add("breaker: claim lag after the close p99 (store clock)", ms(bl.claim.p99), "ms")
	r.atMost("breaker: start lag after the close p99 (handler start)", ms(bl.start.p99), "ms", 50)
	r.add("breaker: start lag after the close max", ms(bl.start.max), "ms")
	r.add("breaker: start lag after CloseBreaker was called p99", ms(bl.fromCall.p99), "ms")
	r.add("breaker: CloseBreaker call", ms(bl.call), "ms")
	for _, part := range []struct {
		name string
		lf   lagFigures
	}{
		{"from the close to the Claim call that took it (host clock)", bl.beforeClaim},
		{"that Claim call's round trip", bl.claimCall},
		{"from its return to the handler's start", bl.handOff},
	} {
		r.add("breaker: "+part.name+" p50", ms(part.lf.p50), "ms")
		r.add("breaker: "+part.name+" p99", ms(part.lf.p99), "ms")
	}
	r.check("breaker: jobs started while it was open", float64(bl.early), "count", "= 0", bl.early == 0)

	r.note("jobs/s as in multiprocess: N / (all processes told to start → the last Stop returned); GlobalConcurrency is 10 × procs × workers, RateLimit's bucket holds 20,000 tokens: neither binds")
	r.note("lags after allowed: the store time a start became allowed (a token arrived, the breaker closed: its ChangedAt, read inside CloseBreaker's transaction before it commits) to the claim (store clock) and to the handler's start (host clock; server and workers on this machine, so the clocks are one); \"after CloseBreaker was called\" counts from the host time before the admin call instead, which adds its round trips before the close")
	return r, nil
}

// flowThroughput runs -n no-op jobs over -procs workers of w slots each
// with the flow options fl and returns jobs/s.
func flowThroughput(ctx context.Context, b *bench, w int, fl workerFlow) (float64, error) {
	d, err := b.createDB(ctx)
	if err != nil {
		return 0, err
	}
	defer d.close()
	s, err := d.scheduler(0)
	if err != nil {
		return 0, err
	}
	if _, err := scheduleNoops(ctx, s, b.opt.n, b.opt.n); err != nil {
		return 0, err
	}
	res, start, err := b.runWorkers(ctx, d, w, fl, int64(b.opt.n), nil)
	if err != nil {
		return 0, err
	}
	var last int64
	for _, r := range res {
		last = max(last, r.StopNS)
	}
	return float64(b.opt.n) / time.Unix(0, last).Sub(start).Seconds(), nil
}

// runWorkers starts -procs workers with w slots and the flow options fl,
// tells them to go at once, calls during (if not nil) once they run, waits
// until their handlers ran n jobs, and stops them. It returns their
// reports and the instant they were told to go.
func (b *bench) runWorkers(ctx context.Context, d *benchDB, w int, fl workerFlow, n int64, during func() error) ([]workerResult, time.Time, error) {
	workers := make([]*worker, 0, b.opt.procs)
	defer func() {
		for _, wk := range workers {
			wk.kill()
		}
	}()
	for i := range b.opt.procs {
		wk, err := b.startWorker(ctx, d.dsn, w, false, i, fl.args()...)
		if err != nil {
			return nil, time.Time{}, err
		}
		workers = append(workers, wk)
	}
	start := time.Now()
	for _, wk := range workers {
		if err := wk.start(); err != nil {
			return nil, start, err
		}
	}
	total := func() int64 {
		var t int64
		for _, wk := range workers {
			t += wk.progress.Load()
		}
		return t
	}
	if during != nil {
		if err := during(); err != nil {
			return nil, start, err
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for total() < n && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitErr := b.waitFor(ctx, "flow", done, total, n, 10*time.Minute)
	var res []workerResult
	for _, wk := range workers {
		r, err := wk.stop()
		if err != nil {
			return nil, start, err
		}
		res = append(res, r)
	}
	workers = nil
	return res, start, waitErr
}

// lagFigures are percentiles of lags.
type lagFigures struct{ p50, p99, max time.Duration }

func lagsOf(ds []time.Duration) lagFigures {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		return s[min(int(q*float64(len(s))), len(s)-1)]
	}
	return lagFigures{p50: at(0.5), p99: at(0.99), max: at(1)}
}

// rateLagResult is what flowRateLag measured.
type rateLagResult struct {
	claim, start lagFigures
	rate         float64
	worst        int
}

// flowRateLag drains -flow-lag-jobs due no-op jobs through
// RateLimit(-flow-rate, 1s) and replays the bucket over the starts.
func flowRateLag(ctx context.Context, b *bench) (*rateLagResult, error) {
	o := b.opt
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	s, err := d.scheduler(0)
	if err != nil {
		return nil, err
	}
	if _, err := scheduleNoops(ctx, s, o.flowLagJobs, o.flowLagJobs); err != nil {
		return nil, err
	}
	rl := store.RateLimit{Limit: o.flowRate, Period: time.Second}
	res, _, err := b.runWorkers(ctx, d, 100, workerFlow{rate: rl.Limit, ratePer: rl.Period, starts: true}, int64(o.flowLagJobs), nil)
	if err != nil {
		return nil, err
	}
	var starts []startRecord
	for _, r := range res {
		starts = append(starts, r.Starts...)
	}
	slices.SortFunc(starts, func(a, b startRecord) int { return int(a[0] - b[0]) })
	var (
		tat          time.Time
		claim, start []time.Duration
		worst        int
	)
	for i, st := range starts {
		claimed, runAt, host := time.UnixMicro(st[0]), time.UnixMicro(st[1]), time.Unix(0, st[2])
		allowed := runAt
		if next := rl.NextAt(tat); next.After(allowed) {
			allowed = next
		}
		claim = append(claim, claimed.Sub(allowed))
		start = append(start, host.Sub(allowed))
		tat = rl.Take(tat, claimed, 1)
		n := 0
		for _, later := range starts[i:] {
			if later[0] >= st[0]+rl.Period.Microseconds() {
				break
			}
			n++
		}
		worst = max(worst, n)
	}
	out := &rateLagResult{claim: lagsOf(claim), start: lagsOf(start), worst: worst}
	if len(starts) > 1 {
		span := time.Duration(starts[len(starts)-1][0]-starts[0][0]) * time.Microsecond
		out.rate = float64(len(starts)-1) / span.Seconds()
	}
	return out, nil
}

// breakerLagResult is what flowBreakerLag measured.
type breakerLagResult struct {
	claim, start lagFigures
	fromCall     lagFigures // start lags from the host time before CloseBreaker
	// The parts of a start's lag, for the jobs a Claim took: from the
	// close to the Claim call, the call's round trip, and from its return
	// to the handler's start.
	beforeClaim, claimCall, handOff lagFigures
	call                            time.Duration // CloseBreaker's own duration
	early                           int
}

// flowBreakerLag holds -flow-breaker-jobs due jobs behind an open breaker,
// closes it, and measures their starts after the close.
func flowBreakerLag(ctx context.Context, b *bench) (*breakerLagResult, error) {
	o := b.opt
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	s, err := d.scheduler(0)
	if err != nil {
		return nil, err
	}
	var (
		closedAt   time.Time // store clock
		hostBefore time.Time
		call       time.Duration
	)
	during := func() error {
		// The workers declared the breaker when they started.
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := s.Admin().OpenBreaker(ctx, noopKind); err == nil {
				break
			} else if time.Now().After(deadline) {
				return fmt.Errorf("open breaker: %w", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := scheduleNoops(ctx, s, o.flowBreakerJobs, o.flowBreakerJobs); err != nil {
			return err
		}
		time.Sleep(time.Second) // held
		hostBefore = time.Now()
		f, err := s.Admin().CloseBreaker(ctx, noopKind)
		if err != nil {
			return err
		}
		call = time.Since(hostBefore)
		closedAt = f.Breaker.ChangedAt
		return nil
	}
	res, _, err := b.runWorkers(ctx, d, 100, workerFlow{breaker: true, starts: true}, int64(o.flowBreakerJobs), during)
	if err != nil {
		return nil, err
	}
	out := &breakerLagResult{call: call}
	var claim, start, fromCall, beforeClaim, claimCall, handOff []time.Duration
	for _, r := range res {
		for _, st := range r.Starts {
			claimed, host := time.UnixMicro(st[0]), time.Unix(0, st[2])
			if claimed.Before(closedAt) {
				out.early++
			}
			claim = append(claim, claimed.Sub(closedAt))
			start = append(start, host.Sub(closedAt))
			fromCall = append(fromCall, host.Sub(hostBefore))
			if begin, end := time.Unix(0, st[3]), time.Unix(0, st[4]); st[3] != 0 {
				beforeClaim = append(beforeClaim, begin.Sub(closedAt))
				claimCall = append(claimCall, end.Sub(begin))
				handOff = append(handOff, host.Sub(end))
			}
		}
	}
	out.claim, out.start, out.fromCall = lagsOf(claim), lagsOf(start), lagsOf(fromCall)
	out.beforeClaim, out.claimCall, out.handOff = lagsOf(beforeClaim), lagsOf(claimCall), lagsOf(handOff)
	return out, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func fmtRuns(v []float64) string {
	out := ""
	for i, x := range v {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%.0f", x)
	}
	return out
}
