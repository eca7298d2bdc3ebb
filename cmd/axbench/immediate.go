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
// while the Scheduler runs, and measures on the host clock from just before
// Schedule to the handler's first instruction.
func runImmediate(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	n := int(float64(o.immRate) * o.immFor.Seconds())
	r := newResult(map[string]any{"rate": o.immRate, "for": o.immFor.String(), "jobs": n, "conns": connsParam(o.conns)})
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
		mu       sync.Mutex
		toStart  = make(durations, 0, n)
		startLag = make(durations, 0, n)
	)
	c := newCounter(n)
	err = s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		var t0 string
		if err := json.Unmarshal(j.Payload, &t0); err != nil {
			return ax.Permanent(err)
		}
		ns, _ := strconv.ParseInt(t0, 10, 64)
		mu.Lock()
		toStart = append(toStart, now.Sub(time.Unix(0, ns)))
		startLag = append(startLag, j.ClaimLag())
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
	calls := make(durations, 0, n)
	interval := time.Second / time.Duration(o.immRate)
	begin := time.Now()
	var schedErr error
	for i := range n {
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		t0 := time.Now()
		payload := json.RawMessage(`"` + strconv.FormatInt(t0.UnixNano(), 10) + `"`)
		if _, schedErr = s.Schedule(ctx, noopKind, payload); schedErr != nil {
			break
		}
		calls = append(calls, time.Since(t0))
	}
	achieved := float64(len(calls)) / time.Since(begin).Seconds()
	var waitErr error
	if schedErr == nil {
		waitErr = b.wait(ctx, "immediate", c, time.Minute)
	}
	stopErr := stopScheduler(s)
	switch {
	case schedErr != nil:
		return nil, schedErr
	case waitErr != nil:
		return nil, waitErr
	case stopErr != nil:
		return nil, fmt.Errorf("stop: %w", stopErr)
	}
	r.add("achieved Schedule rate", achieved, "jobs/s")
	r.add("insert-to-start p50", ms(toStart.pct(50)), "ms")
	r.add("insert-to-start p90", ms(toStart.pct(90)), "ms")
	r.atMost("insert-to-start p99", ms(toStart.pct(99)), "ms", 5)
	r.add("insert-to-start max", ms(toStart.max()), "ms")
	r.add("Schedule call p50", ms(calls.pct(50)), "ms")
	r.add("Schedule call p99", ms(calls.pct(99)), "ms")
	r.add("start lag (store clock) p99", ms(startLag.pct(99)), "ms")
	r.note("insert-to-start: host clock, from before Schedule to the handler's start (includes the Schedule round trip, NOTIFY delivery, claim and dispatch)")
	return r, nil
}
