package ax_test

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// ExampleScheduler_Stats reads the cluster's queue by kind and state and
// the handlers running on this host.
func ExampleScheduler_Stats() {
	ctx := context.Background()
	done := make(chan struct{}, 3)
	s, err := ax.New(ax.Config{
		Store: memstore.New(),
		Observers: []ax.Observer{ax.ObserverFunc(func(e ax.Event) {
			if e.Kind == ax.EventSucceeded {
				done <- struct{}{}
			}
		})},
	})
	if err != nil {
		panic(err)
	}
	if err := s.Handle("thumbnail", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })); err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	for range 3 {
		if _, err := s.Schedule(ctx, "thumbnail", nil); err != nil {
			panic(err)
		}
	}
	if _, err := s.Schedule(ctx, "thumbnail", nil, ax.In(time.Hour)); err != nil {
		panic(err)
	}
	for range 3 {
		<-done
	}

	st, err := s.Stats(ctx)
	if err != nil {
		panic(err)
	}
	q := st.Queue["thumbnail"]
	fmt.Printf("queue: %d scheduled, %d succeeded\n", q[ax.StateScheduled], q[ax.StateSucceeded])
	fmt.Printf("running here: %d\n", st.Running["thumbnail"])
	// Output:
	// queue: 1 scheduled, 3 succeeded
	// running here: 0
}
