package main

import (
	"context"
	"time"

	"github.com/axsched/ax"
)

// runIdle runs a Scheduler with three kinds registered and no jobs, and
// reports the CPU this process used over -idle-for, after a second to
// settle.
func runIdle(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"for": o.idleFor.String(), "kinds": len(idleKinds), "conns": connsParam(o.conns)})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	s, err := d.scheduler(0)
	if err != nil {
		return nil, err
	}
	if err := startIdle(ctx, s); err != nil {
		return nil, err
	}
	defer stopScheduler(s) //nolint:errcheck // measured before
	var commits0, commits1 int64
	commits := `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`
	if commits0, err = d.count(ctx, commits); err != nil {
		return nil, err
	}
	u0, s0 := cpuTime()
	start := time.Now()
	b.progressf("idle: measuring for %s", o.idleFor)
	if err := sleepCtx(ctx, o.idleFor); err != nil {
		return nil, err
	}
	u1, s1 := cpuTime()
	elapsed := time.Since(start)
	if commits1, err = d.count(ctx, commits); err != nil {
		return nil, err
	}
	cpu := (u1 - u0) + (s1 - s0)
	r.atMost("CPU", 100*cpu.Seconds()/elapsed.Seconds(), "% of a core", 1)
	r.add("CPU user", (u1 - u0).Seconds(), "s")
	r.add("CPU sys", (s1 - s0).Seconds(), "s")
	r.add("store transactions/s (pg_stat_database)", float64(commits1-commits0)/elapsed.Seconds(), "1/s")
	r.note("CPU: user+sys of this process over the window; transactions: xact_commit of the database, which PostgreSQL updates lazily (approximate)")
	return r, nil
}

// idleKinds are the kinds an idle scenario's Scheduler handles.
var idleKinds = []string{"bench.a", "bench.b", "bench.c"}

// startIdle registers idleKinds on s, starts it and gives it a second to
// settle; on an error after the start, it stops s.
func startIdle(ctx context.Context, s *ax.Scheduler) error {
	for _, k := range idleKinds {
		if err := s.Handle(k, ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })); err != nil {
			return err
		}
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	if err := sleepCtx(ctx, time.Second); err != nil {
		_ = stopScheduler(s)
		return err
	}
	return nil
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
