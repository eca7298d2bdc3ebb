package main

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax"
)

// runThroughput inserts N no-op jobs with one ScheduleMany (COPY) and works
// them with one Scheduler, once per -workers value, on an emptied table
// each time. Each run has a pool of its own, closed before the server's
// counters are read, so that the cost per job (WAL, commits, HOT share of
// updates; see pgstats.go) covers the insert and the run exactly.
func runThroughput(ctx context.Context, b *bench) (*result, error) {
	if b.opt.encryptCompare {
		return runThroughputEncrypt(ctx, b) // encrypt.go
	}
	o := b.opt
	r := newResult(map[string]any{"n": o.n, "workers": o.workers, "conns": connsParam(o.conns), "async commits": o.asyncCommits})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	t := table{Title: "per worker count", Columns: []string{"workers", "COPY jobs/s", "jobs/s", "starts/s", "CPU s/1k jobs",
		"server CPU s/1k jobs", "elapsed s", "WAL B/job", "FPI/job", "commits/job", "HOT %"}}
	srv, srvErr := newServerClock(ctx, d)
	if srvErr != nil {
		r.note("server CPU: not measured (%v)", srvErr)
	}
	costs := table{Title: "server cost per run, by table (counters over the run; dead and size at its end)", Columns: statsColumns}
	plans := table{Title: "plans of the scheduler's prepared statements (executions)", Columns: planColumns}
	for i, w := range o.workerList {
		if err := d.truncate(ctx); err != nil {
			return nil, err
		}
		if err := d.settle(ctx); err != nil {
			return nil, err
		}
		before, err := d.readStats(ctx)
		if err != nil {
			return nil, err
		}
		sess, err := d.openSession(ctx, o.conns, "axbench-run", traced)
		if err != nil {
			return nil, err
		}
		defer sess.close()
		calls := newTimedStore(sess.store) // jobs per claim and per finish
		s, err := d.schedulerOn(calls, w)  // -outcomes-with-claims, -no-direct-start
		if err != nil {
			return nil, err
		}
		c := newCounter(o.n)
		var claimToStart waitHist
		if err := s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			claimToStart.record(time.Since(j.StartedAt))
			c.inc()
			return nil
		})); err != nil {
			return nil, err
		}
		took, err := scheduleThroughputJobs(ctx, s, o)
		if err != nil {
			return nil, err
		}
		copyRate := float64(o.n) / took.Seconds()

		srv0 := serverCPU(srv)
		cpu0, start := cpuTotal(), time.Now()
		if err := s.Start(ctx); err != nil {
			return nil, err
		}
		waitErr := b.wait(ctx, fmt.Sprintf("throughput W=%d", w), c, 10*time.Minute)
		stopErr := stopScheduler(s)
		written := time.Since(start) // Stop returns once every outcome is written
		cpu := cpuTotal() - cpu0
		srvCPU := serverCPU(srv) - srv0
		if waitErr != nil {
			return nil, waitErr
		}
		if stopErr != nil {
			return nil, fmt.Errorf("stop: %w", stopErr)
		}
		startRate := float64(o.n) / c.doneAt.Sub(start).Seconds()
		elapsed := written
		rate := float64(o.n) / elapsed.Seconds()
		cpuPer1k := cpu.Seconds() / (float64(o.n) / 1000)
		pcs, err := planCounts(ctx, sess.pool)
		if err != nil {
			return nil, fmt.Errorf("read plan counts: %w", err)
		}
		sess.close()
		cost, err := d.costSince(ctx, before, int64(o.n))
		if err != nil {
			return nil, err
		}
		ok, err := d.count(ctx, "SELECT count(*) FROM {alljobs} WHERE state = 'succeeded' AND attempt = 1")
		if err != nil {
			return nil, err
		}
		if ok != int64(o.n) {
			return nil, fmt.Errorf("W=%d: %d of %d jobs succeeded at attempt 1", w, ok, o.n)
		}
		if i == 0 {
			r.atLeast(fmt.Sprintf("COPY insert (ScheduleMany of %d)", o.n), copyRate, "jobs/s", 60000)
		}
		r.atLeast(fmt.Sprintf("no-op jobs/s, W=%d", w), rate, "jobs/s", 20000)
		r.add(fmt.Sprintf("handler starts/s, W=%d", w), startRate, "jobs/s")
		r.add(fmt.Sprintf("CPU per 1k jobs, W=%d", w), cpuPer1k, "s")
		// How full the claims and finishes were: a claim asks for the
		// slots free when it begins.
		all := calls.snapshot()
		for _, c := range []struct {
			op   storeOp
			name string
		}{{opClaim, "claim"}, {opFinish, "finish"}} {
			if cs := summarize(all, c.op, 0, 1<<62); cs.n > 0 {
				r.add(fmt.Sprintf("jobs per %s, W=%d", c.name, w), float64(cs.jobs)/float64(cs.n), "jobs")
				callParts(r, all, c.op, fmt.Sprintf("%s, W=%d", c.name, w))
			}
		}
		addClaimToStart(r, claimToStart.snapshot(), fmt.Sprintf("W=%d: ", w))
		srvPer1k := "-"
		if srv != nil {
			per := srvCPU.Seconds() / (float64(o.n) / 1000)
			r.add(fmt.Sprintf("server CPU per 1k jobs, W=%d", w), per, "s")
			srvPer1k = fmt.Sprintf("%.3f", per)
		}
		cost.addMetrics(r, fmt.Sprintf("W=%d: ", w))
		t.Rows = append(t.Rows, []string{fmt.Sprint(w), fmt.Sprintf("%.0f", copyRate), fmt.Sprintf("%.0f", rate),
			fmt.Sprintf("%.0f", startRate), fmt.Sprintf("%.3f", cpuPer1k), srvPer1k, fmt.Sprintf("%.2f", elapsed.Seconds()),
			fmt.Sprintf("%.0f", cost.perJob(cost.wal)), fmt.Sprintf("%.2f", cost.perJob(cost.walFPI)),
			fmt.Sprintf("%.3f", cost.perJob(cost.commits)), fmt.Sprintf("%.1f", cost.hotShare())})
		costs.Rows = append(costs.Rows, cost.tableRows(fmt.Sprintf("W=%d", w))...)
		plans.Rows = append(plans.Rows, planRows(fmt.Sprintf("W=%d", w), pcs, 4)...)
	}
	r.Tables = append(r.Tables, t, costs, plans)
	statsNote(r, b.machine.Server.Kind == "shared")
	if err := d.noteStorageParams(ctx, r); err != nil {
		return nil, err
	}
	r.note(claimToStartNote)
	r.note("jobs/s: N / (Start → Stop returned, every outcome written); starts/s: N / (Start → last handler start); CPU: user+sys of this process from Start to Stop (pgx client included); server CPU: user+sys of the PostgreSQL server's processes over the same time (postmaster, backends, autovacuum, WAL writer; on a shared server, other clients' work too)")
	return r, nil
}

// callParts adds to r how long the calls of op took from the client, p50
// and p99, and the parts of that: waiting for a pool connection, and the
// statements (round trip, server time and commit). Whatever is left is
// the store's Go code.
func callParts(r *result, calls []storeCall, op storeOp, what string) {
	var took, acquire, query durations
	for _, c := range calls {
		if c.op == op {
			took = append(took, c.took)
			acquire = append(acquire, c.parts.acquire)
			query = append(query, c.parts.query)
		}
	}
	for _, p := range []struct {
		name string
		d    durations
	}{{"", took}, {" pool acquire", acquire}, {" statements", query}} {
		r.add(fmt.Sprintf("%s%s p50", what, p.name), ms(p.d.pct(50)), "ms")
		r.add(fmt.Sprintf("%s%s p99", what, p.name), ms(p.d.pct(99)), "ms")
	}
}

func connsParam(n int) any {
	if n == 0 {
		return "pgxpool default"
	}
	return n
}

// agedMixAge is how long before the insert -aged-mix's Normal jobs fall
// due: past the default PriorityAging (a minute), so that every one of
// them is aged while High jobs are due, which mixes the priorities'
// ranges for pgstore's claim of one kind (its open claim then decides).
const agedMixAge = 2 * time.Minute

// scheduleThroughputJobs schedules throughput's o.n no-op jobs in one
// ScheduleMany (COPY): all due at once at the kind's default priority,
// or with -aged-mix half Normal and aged, half High, in two.
func scheduleThroughputJobs(ctx context.Context, s *ax.Scheduler, o options) (time.Duration, error) {
	if !o.agedMix {
		return scheduleNoops(ctx, s, o.n, o.n)
	}
	aged, err := scheduleNoops(ctx, s, o.n/2, o.n/2, ax.Priority(ax.Normal), ax.At(time.Now().Add(-agedMixAge)))
	if err != nil {
		return 0, err
	}
	high, err := scheduleNoops(ctx, s, o.n-o.n/2, o.n-o.n/2, ax.Priority(ax.High))
	return aged + high, err
}
