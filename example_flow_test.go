package ax_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// ExampleMaxPending bounds the jobs waiting for a kind: once two are
// pending, Schedule returns a *BackpressureError (matching
// ErrBackpressure) that tells the kind, the depth and the limit. The
// bound is stored by the host that handles the kind, so it applies to
// every producer.
func ExampleMaxPending() {
	ctx := context.Background()
	st := memstore.New()
	worker, _ := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	_ = worker.Handle("report.build", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }), ax.MaxPending(2))
	_ = worker.Start(ctx) // declares the kind's settings
	defer worker.Stop(ctx)

	producer, _ := ax.New(ax.Config{Store: st, Logger: zap.NewNop()}) // handles nothing
	for i := range 3 {
		_, err := producer.Schedule(ctx, "report.build", nil, ax.In(time.Hour))
		var bp *ax.BackpressureError
		switch {
		case errors.As(err, &bp):
			fmt.Printf("job %d refused: %d of %d pending (%v)\n", i, bp.Depth, bp.Limit, errors.Is(err, ax.ErrBackpressure))
		case err != nil:
			panic(err)
		default:
			fmt.Printf("job %d scheduled\n", i)
		}
	}
	// Output:
	// job 0 scheduled
	// job 1 scheduled
	// job 2 refused: 2 of 2 pending (true)
}

// ExampleGlobalConcurrency runs jobs of one kind on two Schedulers (two
// hosts sharing a store) with at most two running at once between them.
func ExampleGlobalConcurrency() {
	ctx := context.Background()
	st := memstore.New()
	var (
		mu            sync.Mutex
		running, peak int
		done          sync.WaitGroup
	)
	done.Add(10)
	work := ax.HandlerFunc(func(context.Context, *ax.Job) error {
		defer done.Done()
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	for range 2 {
		s, _ := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
		_ = s.Handle("thumbnail", work, ax.GlobalConcurrency(2))
		_ = s.Start(ctx)
		defer s.Stop(ctx)
		for range 5 {
			_, _ = s.Schedule(ctx, "thumbnail", nil)
		}
	}
	done.Wait()
	fmt.Println("most running at once:", peak)
	// Output:
	// most running at once: 2
}

// ExampleAdmin_OpenBreaker opens a kind's circuit breaker by hand, from an
// Admin that runs no jobs: no host starts the kind's jobs until its
// cool-down ends, or until it is closed.
func ExampleAdmin_OpenBreaker() {
	ctx := context.Background()
	st := memstore.New()
	s, _ := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	_ = s.Handle("payment.capture", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
		ax.CircuitBreaker(ax.BreakerConfig{Failures: 3, CoolDown: time.Minute}))
	_ = s.Start(ctx)
	defer s.Stop(ctx)

	admin, _ := ax.NewAdmin(ax.AdminConfig{Store: st, Logger: zap.NewNop()})
	f, err := admin.OpenBreaker(ctx, "payment.capture")
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Config.Kind, f.Breaker.State, "for", f.Breaker.ProbeAt.Sub(f.Breaker.OpenedAt))
	f, _ = admin.CloseBreaker(ctx, "payment.capture")
	fmt.Println(f.Config.Kind, f.Breaker.State)
	// Output:
	// payment.capture open for 1m0s
	// payment.capture closed
}
