package ax_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// ExampleNewAlerter trips the consecutive failures rule with a kind whose
// downstream is down: ten dead jobs, one alert.
func ExampleNewAlerter() {
	ctx := context.Background()
	alerter := ax.NewAlerter(ax.AlertConfig{}, func(a ax.Alert) {
		fmt.Printf("ALERT %s %s: %s\n", a.Rule, a.Kind, a.Message)
	})
	dead := make(chan struct{}, 10)
	s, err := ax.New(ax.Config{
		Store: memstore.New(),
		// Observers run in order on one goroutine: once the last one sees
		// an event, the Alerter has seen it too.
		Observers: []ax.Observer{alerter, ax.ObserverFunc(func(e ax.Event) {
			if e.Kind == ax.EventDead {
				dead <- struct{}{}
			}
		})},
	})
	if err != nil {
		panic(err)
	}
	err = s.Handle("invoice.send", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return ax.Permanent(errors.New("smtp: connection refused"))
	}), ax.Concurrency(1))
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	for range 10 {
		if _, err := s.Schedule(ctx, "invoice.send", nil); err != nil {
			panic(err)
		}
	}
	for range 10 {
		<-dead
	}
	// Output:
	// ALERT consecutive_failures invoice.send: ax: kind "invoice.send" failed 3 times in a row (threshold 3); last error: permanent: smtp: connection refused
}

// ExampleScheduler_Stats reads the queue, the running handlers and the
// per-kind figures of a StatsObserver.
func ExampleScheduler_Stats() {
	ctx := context.Background()
	counts := ax.NewStatsObserver(ax.StatsConfig{})
	done := make(chan struct{}, 3)
	s, err := ax.New(ax.Config{
		Store: memstore.New(),
		Observers: []ax.Observer{counts, ax.ObserverFunc(func(e ax.Event) {
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
	k := st.Kinds["thumbnail"]
	fmt.Printf("queue: %d scheduled, %d succeeded\n", q[ax.StateScheduled], q[ax.StateSucceeded])
	fmt.Printf("running here: %d\n", st.Running["thumbnail"])
	fmt.Printf("this host: %d scheduled, %d started, %d succeeded\n", k.Scheduled, k.Started, k.Succeeded)
	fmt.Printf("start lag samples: %d\n", k.StartLag.Count)
	// Output:
	// queue: 1 scheduled, 3 succeeded
	// running here: 0
	// this host: 4 scheduled, 3 started, 3 succeeded
	// start lag samples: 3
}

// ExampleStatsObserver shows the percentiles a StatsObserver computes.
func ExampleStatsObserver() {
	so := ax.NewStatsObserver(ax.StatsConfig{Window: time.Minute})
	now := time.Now()
	for i := 1; i <= 10; i++ {
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: now, StartLag: time.Duration(i) * time.Millisecond})
	}
	lag := so.Snapshot()["mail"].StartLag
	fmt.Println(lag.Count, lag.P50, lag.P90, lag.P99, lag.Max)
	// Output: 10 5ms 9ms 10ms 10ms
}
