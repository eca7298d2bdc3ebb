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

// EmailArgs is the payload of the "email.send" jobs of the examples.
type EmailArgs struct {
	To string `json:"to"`
}

// Kind names EmailArgs' job kind.
func (EmailArgs) Kind() string { return "email.send" }

// ExampleRequireScheduled asserts what the code under test scheduled and
// reads the job's args back, typed.
func ExampleRequireScheduled() {
	t := exampleT
	s, _ := axtest.NewScheduler(t, ax.Config{})
	_, _ = ax.Enqueue(context.Background(), s, EmailArgs{To: "ada@example.com"},
		ax.In(10*time.Minute), ax.Priority(ax.High))

	j := axtest.RequireScheduled[EmailArgs](t, s,
		axtest.Priority(ax.High),
		axtest.RunAt(axtest.Epoch.Add(10*time.Minute)))
	axtest.RequireNotScheduled[EmailArgs](t, s, axtest.Payload(EmailArgs{To: "grace@example.com"}))
	fmt.Println(j.Args.To, j.Kind, j.State, j.RunAt.Format(time.RFC3339))
	// Output: ada@example.com email.send scheduled 2030-01-01T09:10:00Z
}

// ExampleRequireScheduledKind asserts on a job whose kind is a string and
// whose payload is not a JobArgs type.
func ExampleRequireScheduledKind() {
	t := exampleT
	s, _ := axtest.NewScheduler(t, ax.Config{})
	_, _ = s.Schedule(context.Background(), "cache.flush", map[string]string{"region": "eu"})

	j := axtest.RequireScheduledKind(t, s, "cache.flush", axtest.Payload(map[string]string{"region": "eu"}))
	axtest.RequireNotScheduledKind(t, s, "cache.flush", axtest.Priority(ax.Low))
	fmt.Println(j.Kind, string(j.Payload))
	// Output: cache.flush {"region":"eu"}
}

// ExampleRequireManyScheduled asserts the jobs of several kinds, in the
// order they were scheduled.
func ExampleRequireManyScheduled() {
	t := exampleT
	s, _ := axtest.NewScheduler(t, ax.Config{})
	ctx := context.Background()
	_, _ = ax.Enqueue(ctx, s, EmailArgs{To: "ada@example.com"})
	_, _ = s.Schedule(ctx, "audit.log", "signup", ax.Priority(ax.Low))

	jobs := axtest.RequireManyScheduled(t, s,
		axtest.ExpectArgs[EmailArgs](axtest.Payload(EmailArgs{To: "ada@example.com"})),
		axtest.Expect{Kind: "audit.log", Match: []axtest.Match{axtest.Priority(ax.Low)}})
	for _, j := range jobs {
		fmt.Println(j.Kind)
	}
	// Output:
	// email.send
	// audit.log
}

// ReportArgs is the payload of the examples' periodic report.
type ReportArgs struct {
	Team string `json:"team"`
}

// Kind names ReportArgs' job kind.
func (ReportArgs) Kind() string { return "report.build" }

// ExampleWork_periodic tests a periodic schedule on the test's clock: each
// Work fires the ticks due at the clock's time and runs their jobs,
// without waiting for a real hour.
func ExampleWork_periodic() {
	t := exampleT
	s, clock := axtest.NewScheduler(t, ax.Config{})
	_ = ax.HandleArgs(s, func(_ context.Context, j *ax.Job, r ReportArgs) error {
		fmt.Println("report for", r.Team, "of the", j.Tick.Format(time.Kitchen), "tick")
		return nil
	})
	_ = s.Every("hourly-report", "@hourly", ReportArgs{Team: "ops"}, ax.JobKind(ReportArgs{}.Kind()))

	fmt.Println(axtest.Work(t, s), "jobs at", clock.Now().Format(time.Kitchen))
	clock.Advance(time.Hour)
	axtest.Work(t, s)
	clock.Advance(time.Hour)
	axtest.Work(t, s)
	j := axtest.RequireScheduled[ReportArgs](t, s, axtest.State(ax.StateSucceeded))
	fmt.Println(j.UniqueKey)
	// Output:
	// 0 jobs at 9:00AM
	// report for ops of the 10:00AM tick
	// report for ops of the 11:00AM tick
	// periodic:hourly-report:2030-01-01T10:00:00Z
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
