package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/axsched/ax"
)

// runImmediate calls Schedule one job at a time at a steady -immediate-rate
// while the Scheduler runs, and reports the start lag of these immediate
// jobs three ways:
//
//   - host clock, from the call: the handler's first instruction minus the
//     host time just before Schedule was called (the job's run time is the
//     store's now() inside that call, so this bounds the lag from above;
//     it includes the insert's round trip). The target applies to it;
//   - host clock, from the return: handler start minus the time Schedule
//     returned, which bounds it from below (negative when the handler
//     started before Schedule returned);
//   - store clock: Job.StartedAt − Job.RunAt.
//
// The default run lasts a minute, long enough for pgx's prepared
// statements to be on generic plans.
// immediateApp names the scheduler's connections in pg_stat_activity.
const immediateApp = "axbench-immediate"

func runImmediate(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	n := int(float64(o.immRate) * o.immFor.Seconds())
	r := newResult(map[string]any{"rate": o.immRate, "for": o.immFor.String(), "jobs": n, "conns": connsParam(o.conns), "direct start": !o.noDirect, "At(now)": o.immAt, "flush": o.immFlush.String(), "async commits": o.asyncCommits, "early start": o.earlyStart})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	var floor durations
	var floorRate float64
	if o.immFloor > 0 {
		if floor, floorRate, err = commitFloor(ctx, d.dsn, o.immRate, o.immFloor); err != nil {
			return nil, err
		}
	}
	// The breakdown of the Schedule call's round trip: pool acquire and
	// statement times from a traced pool of the scheduler's own, server
	// execution and WAL sync times from the server (immediateServer).
	srv := d.immediateServer(ctx)
	sess, err := d.openSession(ctx, o.conns, immediateApp, traced)
	if err != nil {
		return nil, err
	}
	defer sess.close()
	ts := newTimedStore(sess.store) // the scheduler's claims, for claimFigures
	s, err := d.scheduler(0, func(c *ax.Config) { c.Store, c.FlushInterval = ts, o.immFlush })
	if err != nil {
		return nil, err
	}
	// Indexed by the job's sequence number, carried as its payload: the
	// handler may run before Schedule returns, so the times are matched
	// up once every job ran.
	var (
		mu       sync.Mutex
		called   = make([]time.Time, n)
		returned = make([]time.Time, n)
		started  = make([]time.Time, n)
		storeLag = make(durations, 0, n)
	)
	c := newCounter(n)
	err = s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		seq, err := strconv.Atoi(string(j.Payload))
		if err != nil || seq < 0 || seq >= n {
			return ax.Permanent(fmt.Errorf("payload %q: not a sequence number", j.Payload))
		}
		mu.Lock()
		started[seq] = now
		storeLag = append(storeLag, j.ClaimLag())
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
	cpu := startCPUWaits()
	calls := make(durations, 0, n)
	interval := time.Second / time.Duration(o.immRate)
	begin := time.Now()
	// What the server's backends are doing while the calls run.
	waitCtx, stopWaits := context.WithCancel(ctx)
	defer stopWaits()
	waitsDone := make(chan []waitSample, 1)
	go func() {
		w, _ := sampleWaits(waitCtx, d.dsn, begin, `CASE WHEN starts_with(query, '`+insertClaimedPrefix+`') THEN 'insert-claimed' ELSE 'other' END`)
		waitsDone <- w
	}()
	var schedErr error
	for i := range n {
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		t0 := time.Now()
		called[i] = t0 // called and returned are this goroutine's alone
		var opts []ax.ScheduleOption
		if o.immAt {
			opts = append(opts, ax.At(t0))
		}
		if _, schedErr = s.Schedule(ctx, noopKind, json.RawMessage(strconv.Itoa(i)), opts...); schedErr != nil {
			break
		}
		t1 := time.Now()
		returned[i] = t1
		calls = append(calls, t1.Sub(t0))
	}
	achieved := float64(len(calls)) / time.Since(begin).Seconds()
	stopWaits()
	waits := <-waitsDone
	var waitErr error
	if schedErr == nil {
		waitErr = b.wait(ctx, "immediate", c, time.Minute)
	}
	stopErr := stopScheduler(s)
	if schedErr == nil && waitErr == nil && stopErr == nil {
		srv.end(ctx, r)
		cpu.end(r, d.backendPIDs(ctx, immediateApp, o.private))
		custom, generic, err := preparedPlans(ctx, sess.pool, insertClaimedPrefix)
		if err == nil && custom+generic > 0 {
			r.add("InsertClaimed executions on a generic plan", 100*float64(generic)/float64(custom+generic), "%")
		}
	}
	switch {
	case schedErr != nil:
		return nil, schedErr
	case waitErr != nil:
		return nil, waitErr
	case stopErr != nil:
		return nil, fmt.Errorf("stop: %w", stopErr)
	}
	mu.Lock()
	defer mu.Unlock()
	fromCall, fromReturn := make(durations, n), make(durations, n)
	beforeReturn := 0
	for i := range n {
		fromCall[i] = started[i].Sub(called[i])
		fromReturn[i] = started[i].Sub(returned[i])
		if fromReturn[i] < 0 {
			beforeReturn++
		}
	}
	r.add("achieved Schedule rate", achieved, "jobs/s")
	r.add("start lag, host clock from the call, p50", ms(fromCall.pct(50)), "ms")
	r.add("start lag, host clock from the call, p90", ms(fromCall.pct(90)), "ms")
	r.atMost("start lag, host clock from the call, p99", ms(fromCall.pct(99)), "ms", 5)
	r.add("start lag, host clock from the call, max", ms(fromCall.max()), "ms")
	r.add("start lag, host clock from the return, p50", ms(fromReturn.pct(50)), "ms")
	r.add("start lag, host clock from the return, p99", ms(fromReturn.pct(99)), "ms")
	r.add("handler started before Schedule returned", float64(beforeReturn), "count")
	r.add("start lag, store clock, p50", ms(storeLag.pct(50)), "ms")
	r.atMost("start lag, store clock, p99", ms(storeLag.pct(99)), "ms", 5)
	r.add("start lag, store clock, max", ms(storeLag.max()), "ms")
	r.add("Schedule call p50", ms(calls.pct(50)), "ms")
	r.add("Schedule call p99", ms(calls.pct(99)), "ms")
	if floor != nil {
		r.add("commit floor: one-row INSERT round trip p50", ms(floor.pct(50)), "ms")
		r.add("commit floor: one-row INSERT round trip p99", ms(floor.pct(99)), "ms")
		r.add("commit floor: one-row INSERT round trip max", ms(floor.max()), "ms")
		r.add("commit floor: achieved rate", floorRate, "inserts/s")
		r.note("commit floor: before the Scheduler started, %s of one-row INSERTs into a plain table on a connection of their own, one at a time at the same rate, each committed with the server's synchronous_commit: no Schedule can return, and no job start, sooner than this commit (-immediate-floor)", o.immFloor)
	}
	claimFigures(r, ts)
	scheduleParts(r, ts, called, returned)
	nw, sum := waitsBetween(waits, 0, 1<<62)
	r.note("the database's active backends while Schedule was called (mean count, sampled every %s): %s", waitSampleEvery, topWaits(nw, sum, 8))
	r.note("host clock from the call: handler start minus the host time just before Schedule was called (includes the Schedule round trip, NOTIFY delivery, claim and dispatch); from the return: minus the time Schedule returned; store clock: Job.StartedAt − Job.RunAt")
	return r, nil
}
