package axtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
)

// exampleTB stands in for the *testing.T of a real test: examples have
// none. A failed assertion panics; cleanups are dropped.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                           {}
func (exampleTB) Cleanup(func())                    {}
func (exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

var exampleT testing.TB = exampleTB{}

// ExampleNewScheduler tests code that schedules a job for later: assert it
// is scheduled, move the clock, run it inline.
func ExampleNewScheduler() {
	t := exampleT
	s, clock := axtest.NewScheduler(t, ax.Config{})
	_ = ax.Handle(s, "report", func(_ context.Context, j *ax.Job, day string) error {
		fmt.Println("report for", day, "at", clock.Now().Format(time.Kitchen))
		return nil
	})
	_, _ = s.Schedule(context.Background(), "report", "monday", ax.In(time.Hour))

	fmt.Println(axtest.Work(t, s), "jobs ran before their time")
	clock.Advance(time.Hour)
	fmt.Println(axtest.Work(t, s), "job ran")
	// Output:
	// 0 jobs ran before their time
	// report for monday at 10:00AM
	// 1 job ran
}

// ExampleRequireScheduled asserts what the code under test scheduled.
func ExampleRequireScheduled() {
	t := exampleT
	s, _ := axtest.NewScheduler(t, ax.Config{})
	_, _ = s.Schedule(context.Background(), "email.welcome", map[string]string{"to": "ada@example.com"},
		ax.In(10*time.Minute), ax.Priority(ax.High))

	j := axtest.RequireScheduled(t, s, "email.welcome",
		axtest.Payload(map[string]string{"to": "ada@example.com"}),
		axtest.Priority(ax.High),
		axtest.RunAt(axtest.Epoch.Add(10*time.Minute)))
	axtest.RequireNotScheduled(t, s, "email.welcome", axtest.Priority(ax.Low))
	fmt.Println(j.Kind, j.State, j.RunAt.Format(time.RFC3339))
	// Output: email.welcome scheduled 2030-01-01T09:10:00Z
}

// ExampleRunOne runs one due job at a time, to check what happens between
// them.
func ExampleRunOne() {
	t := exampleT
	s, _ := axtest.NewScheduler(t, ax.Config{})
	_ = ax.Handle(s, "step", func(_ context.Context, _ *ax.Job, n int) error {
		fmt.Println("step", n)
		return nil
	})
	for n := range 3 {
		_, _ = s.Schedule(context.Background(), "step", n+1)
	}
	for axtest.RunOne(t, s) {
		fmt.Println("--")
	}
	// Output:
	// step 1
	// --
	// step 2
	// --
	// step 3
	// --
}
