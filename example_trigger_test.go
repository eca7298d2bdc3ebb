package ax_test

import (
	"context"
	"fmt"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// ExampleAdmin_TriggerSchedule runs a yearly schedule by hand: the handler
// tells the manual run from a tick's job, and a second trigger while the
// first run has not ended runs nothing and names it, unless forced.
func ExampleAdmin_TriggerSchedule() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	ran := make(chan string, 2)
	release := make(chan struct{})
	err = s.Handle("books.close", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		<-release // the run stays live while the example triggers again
		ran <- fmt.Sprintf("%s, manual: %v", j.Schedule, j.Triggered())
		return nil
	}))
	if err != nil {
		panic(err)
	}
	if err := s.Every("year-end", "@yearly", nil, ax.JobKind("books.close")); err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil { // declares the schedule
		panic(err)
	}
	defer s.Stop(ctx)

	admin := s.Admin()
	first, err := admin.TriggerSchedule(ctx, "year-end")
	if err != nil {
		panic(err)
	}
	again, _ := admin.TriggerSchedule(ctx, "year-end")
	fmt.Println("second trigger duplicate:", again.Duplicate, "same run:", again.ID == first.ID)
	forced, _ := admin.TriggerSchedule(ctx, "year-end", ax.ForceTrigger())
	fmt.Println("forced duplicate:", forced.Duplicate)

	close(release)
	fmt.Println(<-ran)
	fmt.Println(<-ran)
	// Output:
	// second trigger duplicate: true same run: true
	// forced duplicate: false
	// year-end, manual: true
	// year-end, manual: true
}
