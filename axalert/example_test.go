package axalert_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axalert"
	"github.com/axsched/ax/store/memstore"
)

// ExampleNew trips the consecutive failures rule with a kind whose
// downstream is down: ten dead jobs, one alert.
func ExampleNew() {
	ctx := context.Background()
	alerter := axalert.New(axalert.Config{}, func(a axalert.Alert) {
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
