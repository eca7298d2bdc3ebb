package ax_test

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// ExampleUniqueWhileFinished contrasts the default scope of a unique key,
// which a job gives up when it finishes (a receipt can be sent again once
// the first one went out), with UniqueWhileFinished, which keeps the key
// held by the finished job until it is pruned (a refund never runs twice).
func ExampleUniqueWhileFinished() {
	ctx := context.Background()
	succeeded := make(chan struct{}, 1)
	s, _ := ax.New(ax.Config{Store: memstore.New(), Logger: zap.NewNop(), Observers: []ax.Observer{ax.ObserverFunc(func(e ax.Event) {
		if e.Kind == ax.EventSucceeded { // sent once the outcome is written
			succeeded <- struct{}{}
		}
	})}})
	noop := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	_ = s.Handle("receipt.send", noop)
	_ = s.Handle("payment.refund", noop)
	_ = s.Start(ctx)
	defer s.Stop(ctx)

	jobs := []struct {
		kind string
		opts []ax.ScheduleOption
	}{
		{"receipt.send", []ax.ScheduleOption{ax.UniqueKey("order:42")}},
		{"payment.refund", []ax.ScheduleOption{ax.UniqueKey("order:42"), ax.UniqueWhileFinished()}},
	}
	for _, j := range jobs {
		_, _ = s.Schedule(ctx, j.kind, nil, j.opts...)
		<-succeeded
		again, _ := s.Schedule(ctx, j.kind, nil, j.opts...)
		fmt.Printf("%s after success: duplicate %v\n", j.kind, again.Duplicate)
	}
	// The two kinds share the key "order:42" without colliding: keys are
	// unique per kind unless UniqueGlobal.

	// Output:
	// receipt.send after success: duplicate false
	// payment.refund after success: duplicate true
}

// ExampleUniqueFor allows at most one job per key per window: here one
// digest per user and hour, whatever became of the first one.
func ExampleUniqueFor() {
	ctx := context.Background()
	// A store clock that stands still, mid-window, so that the example's
	// three calls fall in one hour whenever it runs.
	clock := func() time.Time { return time.Date(2030, 1, 1, 10, 30, 0, 0, time.UTC) }
	s, _ := ax.New(ax.Config{Store: memstore.New(memstore.WithClock(clock)), Logger: zap.NewNop()})
	opts := []ax.ScheduleOption{ax.UniqueKey("digest:ada"), ax.UniqueFor(time.Hour), ax.In(time.Minute)}
	first, _ := s.Schedule(ctx, "digest.send", nil, opts...)
	_, _ = s.Cancel(ctx, first.ID) // a cancelled job never holds its key
	second, _ := s.Schedule(ctx, "digest.send", nil, opts...)
	third, _ := s.Schedule(ctx, "digest.send", nil, opts...)
	fmt.Println("after a cancel:", second.Duplicate, "then:", third.Duplicate)
	// Output: after a cancel: false then: true
}

// ExampleUniqueGlobal makes a key unique across kinds: two kinds that
// would both act on the same event share one key.
func ExampleUniqueGlobal() {
	ctx := context.Background()
	s, _ := ax.New(ax.Config{Store: memstore.New(), Logger: zap.NewNop()})
	a, _ := s.Schedule(ctx, "sms.send", nil, ax.UniqueKey("alert:7"), ax.UniqueGlobal(), ax.In(time.Minute))
	b, _ := s.Schedule(ctx, "email.send", nil, ax.UniqueKey("alert:7"), ax.UniqueGlobal(), ax.In(time.Minute))
	fmt.Println("duplicate:", b.Duplicate, "same job:", a.ID == b.ID)
	// Output: duplicate: true same job: true
}
