package ax_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

type EmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// Example shows the whole life of a job: register a typed handler, start,
// schedule a delayed job, stop gracefully.
func Example() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	sent := make(chan struct{})
	err = ax.Handle(s, "email.send", func(ctx context.Context, j *ax.Job, p EmailArgs) error {
		fmt.Printf("attempt %d: sending %q to %s\n", j.Attempt, p.Subject, p.To)
		close(sent)
		return nil
	}, ax.Timeout(30*time.Second), ax.MaxAttempts(8))
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	_, err = s.Schedule(ctx, "email.send", EmailArgs{To: "ada@example.com", Subject: "Welcome"},
		ax.In(20*time.Millisecond), ax.Priority(ax.High))
	if err != nil {
		panic(err)
	}
	<-sent
	// Output: attempt 1: sending "Welcome" to ada@example.com
}

// ExampleUniqueKey shows idempotent scheduling: the second call finds the
// first job and inserts nothing.
func ExampleUniqueKey() {
	ctx := context.Background()
	s, _ := ax.New(ax.Config{Store: memstore.New()})
	first, _ := s.Schedule(ctx, "email.send", EmailArgs{To: "ada@example.com"}, ax.UniqueKey("welcome:ada"), ax.In(time.Hour))
	second, _ := s.Schedule(ctx, "email.send", EmailArgs{To: "ada@example.com"}, ax.UniqueKey("welcome:ada"))
	fmt.Println("duplicate:", second.Duplicate, "same job:", first.ID == second.ID)
	// Output: duplicate: true same job: true
}

// ExamplePermanent shows a failure no retry can fix: the job goes to dead
// after one attempt although it had more.
func ExamplePermanent() {
	ctx := context.Background()
	st := memstore.New()
	s, _ := ax.New(ax.Config{Store: st})
	done := make(chan struct{})
	_ = s.Handle("charge", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		defer close(done)
		return ax.Permanent(errors.New("card declined"))
	}), ax.MaxAttempts(5))
	_ = s.Start(ctx)
	res, _ := s.Schedule(ctx, "charge", nil)
	<-done
	_ = s.Stop(ctx) // flushes the outcome
	rec, _ := st.Get(ctx, res.ID)
	fmt.Println(rec.State, rec.Attempt, rec.Errors[0].Error)
	// Output: dead 1 permanent: card declined
}

// ExampleSnooze shows a handler deferring its job without using an
// attempt, for example while a rate limit lasts.
func ExampleSnooze() {
	ctx := context.Background()
	st := memstore.New()
	s, _ := ax.New(ax.Config{Store: st})
	done := make(chan struct{})
	visits := 0 // one handler call at a time here, so no lock is needed
	_ = s.Handle("sync", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		if visits++; visits == 1 {
			// Rate limited: come back a little later.
			return ax.Snooze(10 * time.Millisecond)
		}
		close(done)
		return nil
	}))
	_ = s.Start(ctx)
	res, _ := s.Schedule(ctx, "sync", nil)
	<-done
	_ = s.Stop(ctx)
	rec, _ := st.Get(ctx, res.ID)
	fmt.Println(rec.State, "attempts counted:", rec.Attempt)
	// Output: succeeded attempts counted: 1
}

// ExampleExponentialBackoff prints the default retry bounds: each delay is
// drawn uniformly between zero and the bound (full jitter).
func ExampleExponentialBackoff() {
	b := ax.ExponentialBackoff{}
	for _, attempt := range []int{1, 2, 3, 10, 13, 20} {
		fmt.Printf("after attempt %d: up to %s\n", attempt, b.Bound(attempt))
	}
	// Output:
	// after attempt 1: up to 1s
	// after attempt 2: up to 2s
	// after attempt 3: up to 4s
	// after attempt 10: up to 8m32s
	// after attempt 13: up to 1h0m0s
	// after attempt 20: up to 1h0m0s
}

// ExampleScheduler_Stop shows a graceful stop: the running job finishes
// before Stop returns, because the deadline allows it.
func ExampleScheduler_Stop() {
	ctx := context.Background()
	st := memstore.New()
	s, _ := ax.New(ax.Config{Store: st})
	running := make(chan struct{})
	_ = s.Handle("report", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		close(running)
		time.Sleep(20 * time.Millisecond) // work in progress when Stop is called
		return nil
	}))
	_ = s.Start(ctx)
	res, _ := s.Schedule(ctx, "report", nil)
	<-running

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println("stop:", s.Stop(stopCtx))
	rec, _ := st.Get(ctx, res.ID)
	fmt.Println("job:", rec.State)
	// Output:
	// stop: <nil>
	// job: succeeded
}
