package main

import (
	"context"
	"fmt"
	"time"
)

// runInsert times Schedule one job at a time (no Scheduler running) and
// ScheduleMany at each -insert-batches size.
func runInsert(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"single": o.insertSingle, "total_per_batch_size": o.insertTotal, "batches": o.batches, "conns": connsParam(o.conns)})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	s, err := d.scheduler(0) // never started: Schedule works from New on
	if err != nil {
		return nil, err
	}
	calls := make(durations, 0, o.insertSingle)
	start := time.Now()
	for range o.insertSingle {
		t0 := time.Now()
		if _, err := s.Schedule(ctx, noopKind, nil); err != nil {
			return nil, err
		}
		calls = append(calls, time.Since(t0))
	}
	r.add("Schedule one at a time", float64(o.insertSingle)/time.Since(start).Seconds(), "jobs/s")
	r.add("Schedule call p50", ms(calls.pct(50)), "ms")
	r.add("Schedule call p99", ms(calls.pct(99)), "ms")
	r.add("Schedule call max", ms(calls.max()), "ms")
	for _, size := range o.batchList {
		if err := d.truncate(ctx); err != nil {
			return nil, err
		}
		total := max(o.insertTotal/size, 1) * size
		took, err := scheduleNoops(ctx, s, total, size)
		if err != nil {
			return nil, err
		}
		rate := float64(total) / took.Seconds()
		name := fmt.Sprintf("ScheduleMany, batches of %d", size)
		if size >= 10_000 {
			r.atLeast(name, rate, "jobs/s", 60000)
		} else {
			r.add(name, rate, "jobs/s")
		}
	}
	r.note("ScheduleMany: %d jobs per batch size, sequential calls, each one transaction with COPY", o.insertTotal)
	return r, nil
}
