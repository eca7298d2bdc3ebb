package axtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
)

// welcomeArgs and reminderArgs are "the user's" job args.
type welcomeArgs struct {
	To string `json:"to"`
}

func (welcomeArgs) Kind() string { return "email.welcome" }

type reminderArgs struct {
	To string `json:"to"`
}

func (reminderArgs) Kind() string { return "email.reminder" }

// signup is "the user's code": it schedules a welcome email in ten
// minutes and a reminder in a day, in one call.
func signup(ctx context.Context, s *ax.Scheduler, email string) error {
	_, err := s.ScheduleMany(ctx, []ax.Request{
		{Kind: welcomeArgs{}.Kind(), Payload: welcomeArgs{To: email}, Options: []ax.ScheduleOption{ax.In(10 * time.Minute), ax.UniqueKey("welcome:" + email)}},
		{Kind: reminderArgs{}.Kind(), Payload: reminderArgs{To: email}, Options: []ax.ScheduleOption{ax.In(24 * time.Hour), ax.Priority(ax.Low)}},
	})
	return err
}

func TestSchedulerAndWork(t *testing.T) {
	s, clock := axtest.NewScheduler(t, ax.Config{})
	var sent []string
	require.NoError(t, ax.HandleArgs(s, func(_ context.Context, _ *ax.Job, w welcomeArgs) error {
		sent = append(sent, w.To)
		return nil
	}))
	require.NoError(t, signup(t.Context(), s, "ada@example.com"))

	j := axtest.RequireScheduled[welcomeArgs](t, s,
		axtest.UniqueKey("welcome:ada@example.com"), axtest.RunAt(axtest.Epoch.Add(10*time.Minute)))
	require.Equal(t, welcomeArgs{To: "ada@example.com"}, j.Args)
	require.Equal(t, ax.StateScheduled, j.State)
	axtest.RequireNotScheduled[welcomeArgs](t, s, axtest.Payload(welcomeArgs{To: "grace@example.com"}))
	axtest.RequireManyScheduled(t, s,
		axtest.ExpectArgs[welcomeArgs](axtest.Priority(ax.Normal)),
		axtest.ExpectArgs[reminderArgs](axtest.Priority(ax.Low)))

	require.Zero(t, axtest.Work(t, s), "nothing is due yet")
	clock.Advance(10 * time.Minute)
	require.Equal(t, 1, axtest.Work(t, s))
	require.Equal(t, []string{"ada@example.com"}, sent)
	axtest.RequireScheduled[welcomeArgs](t, s, axtest.State(ax.StateSucceeded))
	axtest.RequireNotScheduled[welcomeArgs](t, s)
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
	axtest.RequireScheduledKind(t, s, "flaky", axtest.State(ax.StateRetrying), axtest.RunAt(axtest.Epoch.Add(time.Minute)))
	require.False(t, axtest.RunOne(t, s), "the retry is not due yet")
	clock.Advance(time.Minute)
	require.True(t, axtest.RunOne(t, s))
	clock.Advance(time.Minute)
	require.Equal(t, 1, axtest.Work(t, s))
	axtest.RequireScheduledKind(t, s, "flaky", axtest.State(ax.StateSucceeded))
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

// failure runs fn with a fakeT and returns its failure message, empty
// when it passed.
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

// ptrArgs has a Kind method on its pointer, which the zero *ptrArgs (nil)
// cannot call without panicking.
type ptrArgs struct{ name string }

func (p *ptrArgs) Kind() string { return p.name }

// numberArgs is of the welcome kind, but its payload is a number.
type numberArgs int

func (numberArgs) Kind() string { return "email.welcome" }

// TestRequireFamily: each assertion of the family passes or fails on the
// jobs of signup (a welcome and a reminder for ada), and a failure says
// what was looked for and lists what is there.
func TestRequireFamily(t *testing.T) {
	s, _ := axtest.NewScheduler(t, ax.Config{})
	require.NoError(t, signup(t.Context(), s, "ada@example.com"))
	_, err := s.Schedule(t.Context(), "raw", "not args", ax.Priority(ax.High))
	require.NoError(t, err)

	tests := []struct {
		name   string
		assert func(tb testing.TB)
		want   []string // substrings of the failure; none: it passes
	}{
		{"typed found", func(tb testing.TB) {
			j := axtest.RequireScheduled[welcomeArgs](tb, s, axtest.Payload(welcomeArgs{To: "ada@example.com"}))
			if j.Args.To != "ada@example.com" || j.Kind != "email.welcome" {
				tb.Fatalf("got %+v of kind %s", j.Args, j.Kind)
			}
		}, nil},
		{"typed missing", func(tb testing.TB) {
			axtest.RequireScheduled[welcomeArgs](tb, s, axtest.Payload(welcomeArgs{To: "grace@example.com"}))
		}, []string{`no "email.welcome" job matching payload {"to":"grace@example.com"}`, `payload={"to":"ada@example.com"}`}},
		{"typed in another state", func(tb testing.TB) {
			axtest.RequireScheduled[welcomeArgs](tb, s, axtest.State(ax.StateSucceeded))
		}, []string{`no "email.welcome" job matching state succeeded`}},
		{"typed payload does not decode", func(tb testing.TB) { axtest.RequireScheduled[numberArgs](tb, s) },
			[]string{`decode payload {"to":"ada@example.com"} into axtest_test.numberArgs`}},
		{"typed kind panics on the zero value", func(tb testing.TB) { axtest.RequireScheduled[*ptrArgs](tb, s) },
			[]string{"axtest_test.ptrArgs.Kind() panics on the zero value"}},
		{"typed not scheduled passes", func(tb testing.TB) {
			axtest.RequireNotScheduled[welcomeArgs](tb, s, axtest.Priority(ax.High))
		}, nil},
		{"typed not scheduled fails", func(tb testing.TB) { axtest.RequireNotScheduled[reminderArgs](tb, s) },
			[]string{`a "email.reminder" job matching any is scheduled`}},
		{"kind found", func(tb testing.TB) {
			j := axtest.RequireScheduledKind(tb, s, "raw", axtest.Payload("not args"), axtest.Priority(ax.High))
			if string(j.Payload) != `"not args"` {
				tb.Fatalf("payload %s", j.Payload)
			}
		}, nil},
		{"kind missing", func(tb testing.TB) { axtest.RequireScheduledKind(tb, s, "raw", axtest.Priority(ax.Low)) },
			[]string{`no "raw" job matching priority low`, `payload="not args"`}},
		{"kind not scheduled fails", func(tb testing.TB) { axtest.RequireNotScheduledKind(tb, s, "raw") },
			[]string{`a "raw" job matching any is scheduled`}},
		{"kind not scheduled passes", func(tb testing.TB) { axtest.RequireNotScheduledKind(tb, s, "nothing") }, nil},
		{"many in order", func(tb testing.TB) {
			axtest.RequireManyScheduled(tb, s, axtest.ExpectArgs[welcomeArgs](), axtest.ExpectArgs[reminderArgs](),
				axtest.Expect{Kind: "raw"})
		}, nil},
		{"many one kind", func(tb testing.TB) { axtest.RequireManyScheduled(tb, s, axtest.ExpectArgs[welcomeArgs]()) }, nil},
		{"many out of order", func(tb testing.TB) {
			axtest.RequireManyScheduled(tb, s, axtest.ExpectArgs[reminderArgs](), axtest.ExpectArgs[welcomeArgs]())
		}, []string{`job 0 is email.welcome, want a "email.reminder" job`}},
		{"many too few", func(tb testing.TB) {
			axtest.RequireManyScheduled(tb, s, axtest.ExpectArgs[welcomeArgs](), axtest.ExpectArgs[welcomeArgs]())
		}, []string{"1 jobs scheduled, want 2"}},
		{"many match fails", func(tb testing.TB) {
			axtest.RequireManyScheduled(tb, s, axtest.ExpectArgs[welcomeArgs](axtest.Priority(ax.High)))
		}, []string{`job 0 is email.welcome, want a "email.welcome" job matching priority high`}},
		{"many bad args type", func(tb testing.TB) { axtest.RequireManyScheduled(tb, s, axtest.ExpectArgs[*ptrArgs]()) },
			[]string{"panics on the zero value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := failure(t, tt.assert)
			require.Equal(t, len(tt.want) == 0, msg == "", "failure: %q", msg)
			for _, w := range tt.want {
				require.Contains(t, msg, w)
			}
		})
	}
}

// TestRequireScheduledOpensSealedPayloads: with Config.Keys, the store
// keeps payloads sealed, and RequireScheduled matches and decodes them
// plain.
func TestRequireScheduledOpensSealedPayloads(t *testing.T) {
	key, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	ring, err := ax.NewKeyRing(key)
	require.NoError(t, err)
	s, _ := axtest.NewScheduler(t, ax.Config{Keys: ring})
	res, err := ax.Enqueue(t.Context(), s, welcomeArgs{To: "ada@example.com"})
	require.NoError(t, err)
	raw, err := s.Store().Get(t.Context(), res.ID)
	require.NoError(t, err)
	require.True(t, ax.IsSealed(raw.Payload), "the store holds the payload sealed")

	j := axtest.RequireScheduled[welcomeArgs](t, s, axtest.Payload(welcomeArgs{To: "ada@example.com"}))
	require.Equal(t, "ada@example.com", j.Args.To)
}
