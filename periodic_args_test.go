package ax_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// digestArgs states options of every kind: those a schedule's jobs take
// (attempts, priority, metadata) and those the schedule sets itself (time,
// unique key and scope).
type digestArgs struct {
	Scope string `json:"scope"`
}

func (digestArgs) Kind() string { return "digest.build" }

func (a digestArgs) ScheduleOptions() []ax.ScheduleOption {
	return []ax.ScheduleOption{ax.MaxAttempts(4), ax.Priority(ax.Low), ax.Metadata(map[string]string{"scope": a.Scope}),
		ax.In(time.Minute), ax.UniqueKey("report:" + a.Scope), ax.UniqueWhileFinished()}
}

// TestEveryArgs: a typed schedule's jobs are of the args' kind, with the
// args as payload, handled by HandleArgs; the type's options that a
// schedule's jobs take apply, the call's win, and the time and unique key
// are the tick's.
func TestEveryArgs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Polls once a minute of the bubble's time: an hour of it goes by.
		s := newScheduler(t, memstore.New(), func(c *ax.Config) { c.PollInterval = time.Minute })
		got := make(chan *ax.Job, 1)
		require.NoError(t, ax.HandleArgs(s, func(_ context.Context, j *ax.Job, a digestArgs) error {
			require.Equal(t, digestArgs{Scope: "all"}, a)
			got <- j
			return nil
		}))
		require.NoError(t, ax.EveryArgs(s, "hourly-digest", "@every 1h", digestArgs{Scope: "all"}, ax.MaxAttempts(2)))
		start(t, s)
		time.Sleep(time.Hour + time.Second)
		synctest.Wait()
		j := recv(t, got)
		require.Equal(t, "digest.build", j.Kind)
		require.Equal(t, "hourly-digest", j.Schedule)
		require.Equal(t, 2, j.MaxAttempts, "the call's option wins")
		require.Equal(t, ax.Low, j.Priority, "the type's option")
		require.Equal(t, map[string]string{"scope": "all"}, j.Metadata)
		require.Equal(t, j.Tick, j.ScheduledAt, "due at its tick, not a minute later")
		require.Contains(t, j.UniqueKey, "periodic:hourly-digest:", "the tick's key")

		scheds, err := s.Admin().Schedules(t.Context())
		require.NoError(t, err)
		require.Len(t, scheds, 1)
		require.Equal(t, "digest.build", scheds[0].Kind)
	})
}

// TestEveryArgsRefused: what EveryArgs refuses, declaring nothing (the
// name is free after).
func TestEveryArgsRefused(t *testing.T) {
	s := newScheduler(t, memstore.New())
	with := func(opts ...ax.ScheduleOption) optsArgs { return optsArgs{opts: opts} }
	for _, tc := range []struct {
		name string
		args ax.JobArgs
		spec string
		opts []ax.PeriodicOption
		want error
	}{
		{"JobKind", digestArgs{}, "@daily", []ax.PeriodicOption{ax.JobKind("other")}, ax.ErrInvalidOption},
		{"type's FollowUp", with(ax.FollowUp([]ax.State{ax.StateDead}, "alert", nil)), "@daily", nil, ax.ErrInvalidOption},
		{"type's Sequential", with(ax.Sequential("k")), "@daily", nil, ax.ErrInvalidOption},
		{"type's WaitForCapacity", with(ax.WaitForCapacity(context.Background())), "@daily", nil, ax.ErrInvalidOption},
		{"type's invalid option", with(ax.MaxAttempts(0)), "@daily", nil, ax.ErrInvalidOption},
		{"type's nil option", with(nil), "@daily", nil, ax.ErrInvalidOption},
		{"type's invalid In", with(ax.In(-time.Second)), "@daily", nil, ax.ErrInvalidOption},
		{"ScheduleOptions panics", (*nilOptsArgs)(nil), "@daily", nil, ax.ErrInvalidOption},
		{"Kind panics", (*ptrArgs)(nil), "@daily", nil, ax.ErrInvalidKind},
		{"nil JobArgs", nil, "@daily", nil, ax.ErrInvalidKind},
		{"bad spec", digestArgs{}, "not a spec", nil, ax.ErrInvalidSchedule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, ax.EveryArgs(s, tc.name, tc.spec, tc.args, tc.opts...), tc.want)
			require.NoError(t, ax.EveryArgs(s, tc.name, "@daily", digestArgs{}), "nothing was declared")
		})
	}
}
