// Command flow shows flow control across the cluster: limits the store
// applies where jobs start and end, so they hold for every host together.
//
//   - GlobalConcurrency: two hosts (two Schedulers on one store) run a
//     kind's jobs, never more than two at once between them.
//
//   - PartitionBy: webhook deliveries fanned out with ScheduleBatch, one
//     child per subscriber, at most one delivery per subscriber at a
//     time. While the down subscriber's delivery hangs, every delivery to
//     the healthy subscribers goes through: one bad tenant slows no one
//     else.
//
//   - RateLimit: at most 5 starts of a kind in any 500 ms, however the
//     windows are cut.
//
//   - CircuitBreaker: a kind whose downstream is down stops after 3 failed
//     attempts in a row; after the cool-down one probe runs, and its
//     success closes the breaker and lets the waiting jobs through. No job
//     went dead for it.
//
//     go run ./examples/flow                              # SQLite, a temporary file
//     DATABASE_URL=postgres://... go run ./examples/flow  # PostgreSQL
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/examples/internal/demo"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "flow:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := demo.Open(ctx, "flow")
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(out, "AX flow control on %s\n", db.Where)
	for _, step := range []func(context.Context, *demo.Store, io.Writer) error{globalConcurrency, partitions, rateLimit, breaker} {
		if err := step(ctx, db, out); err != nil {
			return err
		}
	}
	return nil
}

// host starts a Scheduler on db's store with register's handlers, and
// returns its Stop.
func host(ctx context.Context, db *demo.Store, register func(*ax.Scheduler) error, obs ...ax.Observer) (*ax.Scheduler, func(), error) {
	s, err := ax.New(ax.Config{Store: db.Store, Logger: zap.NewNop(), Observers: obs})
	if err != nil {
		return nil, nil, err
	}
	if err := register(s); err != nil {
		return nil, nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, nil, err
	}
	return s, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(stopCtx)
	}, nil
}

// globalConcurrency runs 12 jobs on two hosts with at most 2 running at
// once in the cluster.
func globalConcurrency(ctx context.Context, db *demo.Store, out io.Writer) error {
	var (
		mu            sync.Mutex
		running, peak int
		done          sync.WaitGroup
	)
	render := func(ctx context.Context, j *ax.Job) error {
		defer done.Done()
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(30 * time.Millisecond) // the work
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}
	register := func(s *ax.Scheduler) error {
		return s.Handle("video.render", ax.HandlerFunc(render), ax.GlobalConcurrency(2)) // all hosts together
	}
	done.Add(12)
	for range 2 {
		s, stop, err := host(ctx, db, register)
		if err != nil {
			return err
		}
		defer stop()
		for range 6 {
			if _, err := s.Schedule(ctx, "video.render", nil); err != nil {
				return err
			}
		}
	}
	if err := wait(ctx, &done); err != nil {
		return err
	}
	fmt.Fprintf(out, "GlobalConcurrency(2): 12 jobs on 2 hosts, at most %d running at once\n", peak)
	if peak > 2 {
		return fmt.Errorf("%d jobs ran at once, over the limit of 2", peak)
	}
	return nil
}

// partitions fans 3 events out to 3 subscribers each (ScheduleBatch, one
// child per subscriber) under PartitionBy(subscriber, Concurrency 1). The
// down subscriber's first delivery hangs until every healthy delivery is
// done: with partitions that isolate, they all are; had the children
// shared one partition, they would wait behind it until the deadline.
func partitions(ctx context.Context, db *demo.Store, out io.Writer) error {
	const events = 3
	subscribers := []string{"healthy-a", "healthy-b", "down"}
	var (
		healthy sync.WaitGroup
		down    atomic.Int64
		release = make(chan struct{})
	)
	healthy.Add(events * (len(subscribers) - 1))
	deliver := func(ctx context.Context, j *ax.Job) error {
		if j.Metadata["subscriber"] != "down" {
			healthy.Done()
			return nil
		}
		down.Add(1)
		select { // the down subscriber's endpoint hangs
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s, stop, err := host(ctx, db, func(s *ax.Scheduler) error {
		if err := s.Handle("webhook.event", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })); err != nil {
			return err
		}
		return s.Handle("webhook.deliver", ax.HandlerFunc(deliver),
			ax.PartitionBy(ax.PartitionByMetadata("subscriber"), ax.PartitionLimit{Concurrency: 1}))
	})
	if err != nil {
		return err
	}
	defer stop()
	defer close(release)
	for e := range events {
		b := ax.Batch{Completion: ax.Request{Kind: "webhook.event", Payload: map[string]int{"event": e}}}
		for _, sub := range subscribers {
			b.Children = append(b.Children, ax.Request{Kind: "webhook.deliver", Payload: map[string]int{"event": e},
				Options: []ax.ScheduleOption{ax.Metadata(map[string]string{"subscriber": sub})}})
		}
		if _, err := s.ScheduleBatch(ctx, b); err != nil {
			return err
		}
	}
	if err := wait(ctx, &healthy); err != nil {
		return fmt.Errorf("healthy deliveries held back by the down subscriber: %w", err)
	}
	fmt.Fprintf(out, "PartitionBy(subscriber, 1): %d healthy deliveries done while the down subscriber's hung (%d of its %d started)\n",
		events*(len(subscribers)-1), down.Load(), events)
	return nil
}

// rateLimit starts 12 jobs under a limit of 5 starts per 500 ms and checks
// every window from the claim times (the store's clock).
func rateLimit(ctx context.Context, db *demo.Store, out io.Writer) error {
	const n, per = 5, 500 * time.Millisecond
	var (
		mu     sync.Mutex
		starts []time.Time
		done   sync.WaitGroup
	)
	_, stop, err := host(ctx, db, func(s *ax.Scheduler) error {
		return s.Handle("sms.send", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
			defer done.Done()
			mu.Lock()
			starts = append(starts, j.StartedAt)
			mu.Unlock()
			return nil
		}), ax.RateLimit(n, per))
	})
	if err != nil {
		return err
	}
	defer stop()
	done.Add(12)
	reqs := make([]ax.Request, 12)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "sms.send"}
	}
	// A producer that handles nothing: the kind's limit, stored by the
	// host that handles it, holds for its jobs too.
	producer, stopProducer, err := host(ctx, db, func(*ax.Scheduler) error { return nil })
	if err != nil {
		return err
	}
	defer stopProducer()
	if _, err := producer.ScheduleMany(ctx, reqs); err != nil {
		return err
	}
	if err := wait(ctx, &done); err != nil {
		return err
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// Any n+1 consecutive starts span at least per: no window of length
	// per holds more than n.
	tightest := time.Duration(1<<63 - 1)
	for i := n; i < len(starts); i++ {
		tightest = min(tightest, starts[i].Sub(starts[i-n]))
	}
	fmt.Fprintf(out, "RateLimit(%d, %s): 12 starts over %s; any %d consecutive starts spanned at least %s\n",
		n, per, starts[len(starts)-1].Sub(starts[0]).Round(10*time.Millisecond), n+1, tightest.Round(time.Millisecond))
	if tightest < per {
		return fmt.Errorf("%d starts within %s, over the limit of %d per %s", n+1, tightest, n, per)
	}
	return nil
}

// breaker runs 4 jobs of a kind whose downstream is down until the breaker
// opens: 3 attempts fail, the breaker opens, the probe after the cool-down
// succeeds and the rest follow.
func breaker(ctx context.Context, db *demo.Store, out io.Writer) error {
	var (
		down     atomic.Bool
		failures atomic.Int32
		done     sync.WaitGroup
		mu       sync.Mutex
		events   []string
	)
	down.Store(true)
	observe := ax.ObserverFunc(func(e ax.Event) {
		switch e.Kind {
		case ax.EventBreakerOpened:
			down.Store(false) // the downstream recovers while the breaker is open
			fallthrough
		case ax.EventBreakerHalfOpen, ax.EventBreakerClosed:
			mu.Lock()
			events = append(events, fmt.Sprintf("%s (%s)", e.Kind, e.Reason))
			mu.Unlock()
		}
	})
	s, stop, err := host(ctx, db, func(s *ax.Scheduler) error {
		return s.Handle("payment.capture", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
			if down.Load() {
				failures.Add(1)
				return errors.New("gateway: 503 service unavailable")
			}
			done.Done()
			return nil
		}),
			ax.Concurrency(1), // one at a time: exactly Failures attempts fail
			ax.CircuitBreaker(ax.BreakerConfig{Failures: 3, CoolDown: 300 * time.Millisecond}),
			ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return 10 * time.Millisecond })))
	}, observe)
	if err != nil {
		return err
	}
	defer stop()
	done.Add(4)
	for range 4 {
		if _, err := s.Schedule(ctx, "payment.capture", nil); err != nil {
			return err
		}
	}
	if err := wait(ctx, &done); err != nil {
		return err
	}
	stop() // delivers the last events
	fmt.Fprintf(out, "CircuitBreaker(Failures: 3): %d attempts failed, then:\n", failures.Load())
	mu.Lock()
	for _, e := range events {
		fmt.Fprintf(out, "  %s\n", e)
	}
	mu.Unlock()
	fmt.Fprintln(out, "  all 4 payments captured: jobs wait while the breaker is open, using no attempt")
	if failures.Load() != 3 {
		return fmt.Errorf("%d failed attempts, want 3", failures.Load())
	}
	return nil
}

// wait waits for wg or the end of ctx.
func wait(ctx context.Context, wg *sync.WaitGroup) error {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("jobs did not finish in time: %w", ctx.Err())
	}
}
