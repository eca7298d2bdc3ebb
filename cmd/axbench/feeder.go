package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/axsched/ax"
)

// feeder keeps due no-op jobs available to a running Scheduler: whenever
// fewer than low are waiting (inserted minus started), it inserts another
// batch with one ScheduleMany (COPY). Runs of fixed length at tens of
// thousands of jobs a second cannot insert every job up front without
// making the table they measure a different one (a million due rows at the
// start), so the jobs arrive as the scheduler takes them, as they would in
// production. The inserts share the machine with the scheduler, which the
// reports say.
type feeder struct {
	s        *ax.Scheduler // producer: never started
	reqs     []ax.Request
	low      int64
	started  func() int64
	inserted atomic.Int64
}

// newFeeder returns a feeder inserting batches of batch jobs through s and
// keeping at least two batches waiting.
func newFeeder(s *ax.Scheduler, batch int, started func() int64) *feeder {
	reqs := make([]ax.Request, batch)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: noopKind}
	}
	return &feeder{s: s, reqs: reqs, low: 2 * int64(batch), started: started}
}

// top inserts batches until at least low jobs are waiting. The inserts do
// not take ctx's cancellation, so that inserted is exact: a COPY cut off
// by a cancel might or might not have committed.
func (f *feeder) top(ctx context.Context) error {
	for f.inserted.Load()-f.started() < f.low {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		_, err := f.s.ScheduleMany(ictx, f.reqs)
		cancel()
		if err != nil {
			return fmt.Errorf("feeder: %w", err)
		}
		f.inserted.Add(int64(len(f.reqs)))
	}
	return nil
}

// run tops the queue up every 2 ms until stop is closed.
func (f *feeder) run(ctx context.Context, stop <-chan struct{}) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := f.top(ctx); err != nil {
			return err
		}
	}
}
