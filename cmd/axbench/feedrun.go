package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/axsched/ax"
)

// feedSpec is one timed run of no-op jobs: a Scheduler of workers works
// jobs that a feeder keeps available; the first warmup is not measured,
// then measure is, in intervals of interval (0: one interval).
type feedSpec struct {
	label    string
	workers  int
	warmup   time.Duration
	measure  time.Duration
	interval time.Duration
	// analyze runs ANALYZE on the schema's tables once the feeder's first
	// batches are in, before the Scheduler starts.
	analyze bool
}

// drainLimit bounds the wait for the jobs a feedRun's producer left.
const drainLimit = time.Minute

// feedResult is what a feedRun measured.
type feedResult struct {
	rate      float64   // jobs/s over the measured time
	intervals []float64 // jobs/s in each interval of it
	jobs      int64     // jobs run over the whole run
	left      int64     // jobs inserted but not run: the drain timed out
	drain     time.Duration
	cost      statsDelta
	plans     []planCount
	top       []topStatement // with pg_stat_statements: the statements with the most server time
}

// feedRun runs spec on d. The Scheduler and the feeder each get a pool of
// their own, so the producer does not take the scheduler's connections;
// both are closed before the server's counters are read, so the run's cost
// (WAL, commits, updates) covers every job it inserted and finished.
func (b *bench) feedRun(ctx context.Context, d *benchDB, spec feedSpec) (*feedResult, error) {
	if err := d.settle(ctx); err != nil {
		return nil, err
	}
	before, err := d.readStats(ctx)
	if err != nil {
		return nil, err
	}
	haveStatements := d.statStatements(ctx)
	if haveStatements {
		if err := d.resetStatements(ctx); err != nil {
			return nil, err
		}
	}
	run, err := d.openSession(ctx, b.opt.conns, "axbench-run")
	if err != nil {
		return nil, err
	}
	defer run.close()
	prod, err := d.openSession(ctx, b.opt.conns, "axbench-producer")
	if err != nil {
		return nil, err
	}
	defer prod.close()
	s, err := newScheduler(run.store, spec.workers)
	if err != nil {
		return nil, err
	}
	var ran atomic.Int64
	if err := s.Handle(noopKind, ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran.Add(1)
		return nil
	})); err != nil {
		return nil, err
	}
	ps, err := newScheduler(prod.store, 0)
	if err != nil {
		return nil, err
	}
	f := newFeeder(ps, b.opt.feedBatch, ran.Load)
	if err := f.top(ctx); err != nil {
		return nil, err
	}
	if spec.analyze {
		if err := d.maintain(ctx, "ANALYZE"); err != nil {
			return nil, err
		}
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	stopFeed, fed := make(chan struct{}), make(chan struct{})
	var feedErr error
	go func() {
		defer close(fed)
		feedErr = f.run(ctx, stopFeed)
	}()
	res, measureErr := b.measureRate(ctx, spec, ran.Load, fed)
	close(stopFeed)
	<-fed
	if err := errors.Join(measureErr, feedErr); err != nil {
		_ = stopScheduler(s)
		return nil, err
	}

	// Drain what the feeder left waiting, so that every inserted job ran
	// and the cost per job is exact; but a run slow enough to need more
	// than drainLimit is reported with the jobs it left, and its cost is
	// divided by the jobs it ran (overstating it by their inserts).
	drainStart := time.Now()
	for ran.Load() < f.inserted.Load() && ctx.Err() == nil && time.Since(drainStart) < drainLimit {
		time.Sleep(5 * time.Millisecond)
	}
	res.drain = time.Since(drainStart)
	if stopErr := stopScheduler(s); stopErr != nil {
		return nil, fmt.Errorf("stop: %w", stopErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.jobs = ran.Load()
	res.left = f.inserted.Load() - res.jobs
	if res.plans, err = planCounts(ctx, run.pool); err != nil {
		return nil, fmt.Errorf("read plan counts: %w", err)
	}
	if haveStatements {
		if res.top, err = d.topStatements(ctx, 5); err != nil {
			return nil, fmt.Errorf("read pg_stat_statements: %w", err)
		}
	}
	run.close()
	prod.close()
	if res.cost, err = d.costSince(ctx, before, res.jobs); err != nil {
		return nil, err
	}
	return res, nil
}

// measureRate samples ran after the warm-up and at each interval boundary,
// printing progress every 5 s.
func (b *bench) measureRate(ctx context.Context, spec feedSpec, ran func() int64, fed <-chan struct{}) (*feedResult, error) {
	interval := spec.interval
	if interval <= 0 || interval > spec.measure {
		interval = spec.measure
	}
	begin := time.Now()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	wait := func(until time.Time) error {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-fed: // the feeder stops early only on error, which the caller reports
				return errors.New("feeder stopped")
			case <-progress.C:
				b.progressf("%s: %d jobs in %.0fs", spec.label, ran(), time.Since(begin).Seconds())
			}
		}
	}
	if err := wait(begin.Add(spec.warmup)); err != nil {
		return nil, err
	}
	res := &feedResult{}
	t0, n0 := time.Now(), ran()
	prevT, prevN := t0, n0
	for end := t0.Add(interval); ; end = end.Add(interval) {
		end = minTime(end, t0.Add(spec.measure))
		if err := wait(end); err != nil {
			return nil, err
		}
		now, n := time.Now(), ran()
		res.intervals = append(res.intervals, float64(n-prevN)/now.Sub(prevT).Seconds())
		prevT, prevN = now, n
		if !now.Before(t0.Add(spec.measure)) {
			res.rate = float64(n-n0) / now.Sub(t0).Seconds()
			return res, nil
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
