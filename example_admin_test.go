package ax_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
	"go.uber.org/zap"
)

// ExampleAdmin_List pages through the jobs of one tenant, oldest first,
// from an Admin that runs no jobs (a CLI or an admin endpoint would make
// it the same way, on the cluster's store).
func ExampleAdmin_List() {
	ctx := context.Background()
	st := memstore.New()
	s, _ := ax.New(ax.Config{Store: st}) // schedules only; never started
	for i, tenant := range []string{"acme", "globex", "acme", "acme"} {
		_, err := s.Schedule(ctx, "invoice.send", map[string]int{"invoice": i}, ax.In(time.Hour),
			ax.Metadata(map[string]string{"tenant": tenant}))
		if err != nil {
			panic(err)
		}
	}

	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st})
	if err != nil {
		panic(err)
	}
	opts := ax.ListOptions{
		Filter: ax.JobFilter{Kinds: []string{"invoice.send"}, Metadata: map[string]string{"tenant": "acme"}},
		Order:  ax.OldestFirst,
		Limit:  2,
	}
	for page := 1; ; page++ {
		list, err := admin.List(ctx, opts)
		if err != nil {
			panic(err)
		}
		for _, j := range list.Jobs {
			fmt.Printf("page %d: %s %s %s\n", page, j.Kind, j.State, j.Payload)
		}
		if list.Cursor == "" {
			break
		}
		opts.Cursor = list.Cursor
	}
	n, _ := admin.Count(ctx, opts.Filter)
	fmt.Println("acme invoices:", n)
	// Output:
	// page 1: invoice.send scheduled {"invoice":0}
	// page 1: invoice.send scheduled {"invoice":2}
	// page 2: invoice.send scheduled {"invoice":3}
	// acme invoices: 3
}

// ExampleAdmin_RetryJobs retries, in bulk, the jobs that died while a
// downstream service was down, once it is back.
func ExampleAdmin_RetryJobs() {
	ctx := context.Background()
	var down atomic.Bool
	down.Store(true)
	finished := make(chan ax.EventKind, 10)
	s, _ := ax.New(ax.Config{Store: memstore.New(), Logger: zap.NewNop(), Observers: []ax.Observer{ax.ObserverFunc(func(e ax.Event) {
		if e.Kind == ax.EventDead || e.Kind == ax.EventSucceeded {
			finished <- e.Kind
		}
	})}})
	_ = s.Handle("webhook.post", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		if down.Load() {
			return ax.Permanent(errors.New("connection refused"))
		}
		return nil
	}))
	_ = s.Start(ctx)
	defer s.Stop(ctx)
	for range 3 {
		_, _ = s.Schedule(ctx, "webhook.post", nil)
	}
	for range 3 {
		<-finished
	}

	admin := s.Admin()
	failed := ax.JobFilter{States: []ax.State{ax.StateDead}, ErrorContains: "connection refused"}
	n, _ := admin.Count(ctx, failed)
	fmt.Println("dead:", n)

	down.Store(false)
	retried, err := admin.RetryJobs(ctx, failed)
	if err != nil {
		panic(err)
	}
	fmt.Println("retried:", retried)
	for range 3 {
		<-finished
	}
	n, _ = admin.Count(ctx, ax.JobFilter{States: []ax.State{ax.StateSucceeded}})
	fmt.Println("succeeded:", n)
	// Output:
	// dead: 3
	// retried: 3
	// succeeded: 3
}

// ExampleAdmin_PauseKind holds every job of a kind across the cluster
// (here, one host) and lets them run again.
func ExampleAdmin_PauseKind() {
	ctx := context.Background()
	ran := make(chan struct{})
	s, _ := ax.New(ax.Config{Store: memstore.New()})
	_ = s.Handle("report.build", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		close(ran)
		return nil
	}))
	// Paused before Start here, so that no claim is in flight: a claim
	// that began before a pause may still start the kind's jobs (a pause
	// reaches every claim within one heartbeat).
	admin := s.Admin()
	if _, err := admin.PauseKind(ctx, "report.build"); err != nil {
		panic(err)
	}
	_ = s.Start(ctx)
	defer s.Stop(ctx)

	_, _ = s.Schedule(ctx, "report.build", nil)
	kinds, _ := admin.Kinds(ctx)
	for _, k := range kinds {
		fmt.Printf("%s paused=%t scheduled=%d\n", k.Kind, k.Paused, k.Jobs[ax.StateScheduled])
	}

	if _, err := admin.ResumeKind(ctx, "report.build"); err != nil {
		panic(err)
	}
	<-ran
	fmt.Println("ran after the resume")
	// Output:
	// report.build paused=true scheduled=1
	// ran after the resume
}
