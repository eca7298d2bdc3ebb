package main

import (
	"context"
	"fmt"
	"time"
)

// runMultiprocess inserts N no-op jobs, then works them with -procs worker
// processes (this program re-executed) started at the same instant. Zero
// duplicates is proven twice: the processes' handler calls add up to N, and
// every job succeeded at attempt 1 (each claim counts an attempt).
func runMultiprocess(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"n": o.n, "procs": o.procs, "workers_per_proc": o.mpWorkers, "conns": connsParam(o.conns)})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	s, err := d.scheduler(0)
	if err != nil {
		return nil, err
	}
	if _, err := scheduleNoops(ctx, s, o.n, o.n); err != nil {
		return nil, err
	}
	srv, srvErr := newServerClock(ctx, d)
	if srvErr != nil {
		r.note("server CPU: not measured (%v)", srvErr)
	}
	if err := d.settle(ctx); err != nil {
		return nil, err
	}
	haveStatements := d.statStatements(ctx)
	if haveStatements {
		if err := d.resetStatements(ctx); err != nil {
			return nil, err
		}
	}
	before, err := d.readStats(ctx)
	if err != nil {
		return nil, err
	}
	workers := make([]*worker, 0, o.procs)
	defer func() {
		for _, w := range workers {
			w.kill()
		}
	}()
	for i := range o.procs {
		w, err := b.startWorker(ctx, d.dsn, o.mpWorkers, false, i)
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	srv0 := serverCPU(srv)
	start := time.Now()
	for _, w := range workers {
		if err := w.start(); err != nil {
			return nil, err
		}
	}
	total := func() int64 {
		var n int64
		for _, w := range workers {
			n += w.progress.Load()
		}
		return n
	}
	// Probes are scheduled while nine tenths of the backlog is worked, so
	// that each meets a backlog; the run ends when every job and probe ran.
	var probes *prober
	if o.probeEvery > 0 {
		probeCtx, stopProbes := context.WithCancel(ctx)
		defer stopProbes()
		probes = startProber(probeCtx, s, o.probeEvery, func() bool { return total() >= int64(o.n)*9/10 })
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if probes != nil {
				select {
				case <-probes.done:
				default:
					time.Sleep(5 * time.Millisecond)
					continue
				}
			}
			if total() >= int64(o.n)+probes.count() {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitErr := b.waitFor(ctx, "multiprocess", done, total, int64(o.n), 10*time.Minute)
	var (
		calls, last int64
		cpu         float64
		perProc     []any
		claims      []any
		claimList   []claimCounts
		waits       waitCounts
		highLags    waitCounts
		fewest      = int64(o.n)
		most        int64
	)
	var srvCPU time.Duration
	for i, w := range workers {
		res, err := w.stop()
		if i == len(workers)-1 {
			srvCPU = serverCPU(srv) - srv0 // every outcome written
		}
		if err != nil {
			return nil, err
		}
		calls += res.Count
		last = max(last, res.StopNS)
		cpu += res.UserS + res.SysS
		perProc = append(perProc, res.Count)
		fewest, most = min(fewest, res.Count), max(most, res.Count)
		waits.add(res.ClaimToStart)
		highLags.add(res.HighLag)
		c := res.Claims
		claimList = append(claimList, c)
		claims = append(claims, fmt.Sprintf("calls %d empty %d short %d jobs/call %.1f mean %.1fms;", c.Calls, c.Empty, c.Short, float64(c.Jobs)/float64(max(c.Calls, 1)), float64(c.NS)/float64(max(c.Calls, 1))/1e6))
	}
	workers = nil
	if waitErr != nil {
		return nil, waitErr
	}
	elapsed := time.Unix(0, last).Sub(start)
	ran := int64(o.n) // the backlog's jobs and the probes
	if probes != nil {
		n, err := probes.wait()
		if err != nil {
			return nil, fmt.Errorf("schedule a probe: %w", err)
		}
		ran += n
	}
	var succeeded, notFirst int64
	err = d.pool.QueryRow(ctx, d.sub(`SELECT count(*) FILTER (WHERE state = 'succeeded'),
		count(*) FILTER (WHERE attempt <> 1) FROM {alljobs}`)).Scan(&succeeded, &notFirst)
	if err != nil {
		return nil, err
	}
	r.add(fmt.Sprintf("total no-op jobs/s, %d processes", o.procs), float64(ran)/elapsed.Seconds(), "jobs/s")
	r.add("CPU per 1k jobs (workers, summed)", cpu/(float64(ran)/1000), "s")
	if srv != nil {
		r.add("server CPU per 1k jobs", srvCPU.Seconds()/(float64(ran)/1000), "s")
	}
	var jobs, claimCalls int64
	for _, c := range claimList {
		jobs += c.Jobs
		claimCalls += c.Calls
	}
	r.add("claim calls per job", float64(claimCalls)/float64(max(jobs, 1)), "calls/job")
	addClaimToStart(r, waits, "")
	// Fairness: how far the hosts' shares stray from an even split.
	even := float64(ran) / float64(o.procs)
	r.add("jobs of the host that ran fewest / an even share", float64(fewest)/even, "ratio")
	r.add("jobs of the host that ran most / an even share", float64(most)/even, "ratio")
	if n := highLags.total(); n > 0 {
		r.add("High-priority probes run during the backlog", float64(n), "count")
		addQuantiles(r, highLags, "High-priority probe: insert → handler start")
	}
	cost, err := d.costSince(ctx, before, ran)
	if err != nil {
		return nil, err
	}
	r.add("commits per job", cost.perJob(cost.commits), "commits/job")
	if haveStatements {
		// Which statements the split costs the server: the hosts' claims
		// and finishes, side by side with one host's.
		top, err := d.topStatements(ctx, 6)
		if err != nil {
			return nil, fmt.Errorf("read pg_stat_statements: %w", err)
		}
		label := fmt.Sprintf("%d×%d", o.procs, o.mpWorkers)
		r.Tables = append(r.Tables, table{Title: "pg_stat_statements: the statements with the most server time",
			Columns: statementColumns("run"), Rows: statementRows(label, top)})
	}
	r.check("handler calls − jobs (duplicates)", float64(calls-ran), "count", "= 0", calls == ran)
	r.check("jobs not at attempt 1", float64(notFirst), "count", "= 0", notFirst == 0)
	r.check("jobs succeeded", float64(succeeded), "count", fmt.Sprintf("= %d", ran), succeeded == ran)
	r.Params["calls_per_proc"] = fmt.Sprint(perProc...)
	r.Params["claims_per_proc"] = fmt.Sprint(claims...)
	r.note(claimToStartNote)
	if probes != nil {
		r.note("High-priority probe: one High job scheduled every %s while the first nine tenths of the backlog of Normal jobs is worked (by a Scheduler that is not started, so none starts directly), from its insert (store clock) to its handler's start (host clock); every due High job is claimed before any Normal one due for less than PriorityAging (a minute by default: in a longer run the backlog's aged jobs go first), so this is how long a job that must start next waits behind the hosts' holds. The probes count among the jobs", o.probeEvery)
	}
	r.note("jobs/s: N / (the instant all processes were told to start → the last one's Stop returned, every outcome written; Stop is requested when the handler calls add up to N); processes set up (pool, migrate check, handlers) before that")
	return r, nil
}
