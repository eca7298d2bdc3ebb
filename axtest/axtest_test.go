package axtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
)

type welcome struct {
	To string `json:"to"`
}

// signup is "the user's code": it schedules a welcome email in ten
// minutes and a reminder in a day, in one call.
func signup(ctx context.Context, s *ax.Scheduler, email string) error {
	_, err := s.ScheduleMany(ctx, []ax.Request{
		{Kind: "email.welcome", Payload: welcome{To: email}, Options: []ax.ScheduleOption{ax.In(10 * time.Minute), ax.UniqueKey("welcome:" + email)}},
		{Kind: "email.reminder", Payload: welcome{To: email}, Options: []ax.ScheduleOption{ax.In(24 * time.Hour), ax.Priority(ax.Low)}},
	})
	return err
}

func TestSchedulerAndWork(t *testing.T) {
	s, clock := axtest.NewScheduler(t, ax.Config{})
	var sent []string
	require.NoError(t, ax.Handle(s, "email.welcome", func(_ context.Context, _ *ax.Job, w welcome) error {
		sent = append(sent, w.To)
		return nil
	}))
	require.NoError(t, signup(t.Context(), s, "ada@example.com"))

	j := axtest.RequireScheduled(t, s, "email.welcome",
		axtest.Payload(welcome{To: "ada@example.com"}), axtest.UniqueKey("welcome:ada@example.com"),
		axtest.RunAt(axtest.Epoch.Add(10*time.Minute)))
	require.Equal(t, ax.StateScheduled, j.State)
	axtest.RequireNotScheduled(t, s, "email.welcome", axtest.Payload(welcome{To: "grace@example.com"}))
	axtest.RequireManyScheduled(t, s,
		axtest.Expect{Kind: "email.welcome", Match: []axtest.Match{axtest.Priority(ax.Normal)}},
		axtest.Expect{Kind: "email.reminder", Match: []axtest.Match{axtest.Priority(ax.Low)}})

	require.Zero(t, axtest.Work(t, s), "nothing is due yet")
	clock.Advance(10 * time.Minute)
	require.Equal(t, 1, axtest.Work(t, s))
	require.Equal(t, []string{"ada@example.com"}, sent)
	axtest.RequireScheduled(t, s, "email.welcome", axtest.State(ax.StateSucceeded))
	axtest.RequireNotScheduled(t, s, "email.welcome")
}

func TestRetriesFollowTheClock(t *testing.T) {
	s, clock := axtest.NewScheduler(t, ax.Config{RetryPolicy: ax.RetryPolicyFunc(func(int, error) time.Duration { return time.Minute })})
	attempts := 0
	require.NoError(t, s.Handle("flaky", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		attempts++
		if attempts < 3 {
			return errors.New("downstream unavailable")
		}
		return nil
	})))
	_, err := s.Schedule(t.Context(), "flaky", nil)
	require.NoError(t, err)
	require.Equal(t, 1, axtest.Work(t, s))
	axtest.RequireScheduled(t, s, "flaky", axtest.State(ax.StateRetrying), axtest.RunAt(axtest.Epoch.Add(time.Minute)))
	require.False(t, axtest.RunOne(t, s), "the retry is not due yet")
	clock.Advance(time.Minute)
	require.True(t, axtest.RunOne(t, s))
	clock.Advance(time.Minute)
	require.Equal(t, 1, axtest.Work(t, s))
	axtest.RequireScheduled(t, s, "flaky", axtest.State(ax.StateSucceeded))
}

// fakeT records failures instead of stopping the test, to check the
// messages of failing assertions.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}

func failure(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	ft := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != ft {
				panic(r)
			}
		}()
		fn(ft)
	}()
	return ft.failed
}

func TestFailuresSayWhatIsThere(t *testing.T) {
	s, _ := axtest.NewScheduler(t, ax.Config{})
	require.NoError(t, signup(t.Context(), s, "ada@example.com"))
	msg := failure(t, func(tb testing.TB) {
		axtest.RequireScheduled(tb, s, "email.welcome", axtest.Payload(welcome{To: "grace@example.com"}))
	})
	require.Contains(t, msg, `no "email.welcome" job matching payload {"to":"grace@example.com"}`)
	require.Contains(t, msg, `payload={"to":"ada@example.com"}`)
	msg = failure(t, func(tb testing.TB) { axtest.RequireNotScheduled(tb, s, "email.welcome") })
	require.True(t, strings.Contains(msg, "is scheduled"), msg)
	msg = failure(t, func(tb testing.TB) {
		axtest.RequireManyScheduled(tb, s, axtest.Expect{Kind: "email.welcome"})
	})
	require.Empty(t, msg, "one welcome job is scheduled")
	msg = failure(t, func(tb testing.TB) {
		axtest.RequireManyScheduled(tb, s, axtest.Expect{Kind: "email.reminder"}, axtest.Expect{Kind: "email.welcome"})
	})
	require.Contains(t, msg, `job 0 is email.welcome, want a "email.reminder" job`)
}

// TestPostgresScheduleTx: a ScheduleTx call is tested without writing SQL
// for the job: the test gets its own schema, begins a transaction on the
// pool, and asserts what was scheduled once it commits (and that a rolled
// back one left nothing).
func TestPostgresScheduleTx(t *testing.T) {
	s, pool := axtest.NewPostgresScheduler(t, ax.Config{})
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = s.ScheduleTx(ctx, tx, "invoice.send", map[string]int{"order": 1})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	axtest.RequireNotScheduled(t, s, "invoice.send")

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	_, err = s.ScheduleTx(ctx, tx, "invoice.send", map[string]int{"order": 2})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	axtest.RequireScheduled(t, s, "invoice.send", axtest.Payload(map[string]int{"order": 2}))

	var sent []int
	require.NoError(t, ax.Handle(s, "invoice.send", func(_ context.Context, _ *ax.Job, p map[string]int) error {
		sent = append(sent, p["order"])
		return nil
	}))
	require.Equal(t, 1, axtest.Work(t, s))
	require.Equal(t, []int{2}, sent)
}
