package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/axsched/ax"
)

// prober schedules a High-priority no-op job every interval while a
// backlog of Normal ones is worked, so that the worker processes can time
// it from its insert to its handler's start (workerResult.HighLag). Every
// due High job is claimed before any Normal one that has been due for less
// than PriorityAging (a minute by default; runs that last longer see the
// backlog's aged jobs go first, as aging means them to), so its wait is
// what the hosts' holds cost a job that must start next: until some host claims
// again, and then the claim itself. A host that takes jobs ahead claims
// again only once its hold has drained.
type prober struct {
	scheduled atomic.Int64
	err       error // the first Schedule error; read after done
	done      chan struct{}
}

// startProber starts scheduling on s (a Scheduler that is not started, so
// that no probe starts directly on it) every interval until stop reports
// true or ctx ends.
func startProber(ctx context.Context, s *ax.Scheduler, every time.Duration, stop func() bool) *prober {
	p := &prober{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for !stop() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := s.Schedule(ctx, noopKind, nil, ax.Priority(ax.High)); err != nil {
				p.err = err
				return
			}
			p.scheduled.Add(1)
		}
	}()
	return p
}

// wait waits for the prober to stop and returns how many it scheduled.
func (p *prober) wait() (int64, error) {
	<-p.done
	return p.scheduled.Load(), p.err
}

// count returns how many probes were scheduled (0 for a nil prober).
func (p *prober) count() int64 {
	if p == nil {
		return 0
	}
	return p.scheduled.Load()
}
