package ax_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestAdminSchedules lists a declared schedule with its zone, kind and
// next tick; pauses it (ticks pass without jobs); resumes it (the next
// tick fires, the passed ones do not); and triggers it by hand.
func TestAdminSchedules(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	at := func(h, m int) time.Time { return time.Date(2026, 1, 1, h, m, 0, 0, time.UTC) }
	clock := &frozenClock{at: at(5, 59)} // a whole minute: the declaration's stored LastTick is a microsecond later, off the ticks
	st := newMemstore(memstore.WithClock(clock.Now))
	a := newAdmin(t, st)
	ctx := t.Context()
	s := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = 10 * time.Millisecond })
	require.NoError(t, s.Every("half-hourly", "*/30 * * * *", map[string]int{"n": 1},
		ax.JobKind("report.build"), ax.Location(berlin), ax.Priority(ax.High)))
	start(t, s)
	waitDeclared(t, st, "half-hourly")

	list, err := a.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	sc := list[0]
	require.Equal(t, "half-hourly", sc.Name)
	require.Equal(t, "CRON_TZ=Europe/Berlin */30 * * * *", sc.Spec)
	require.Equal(t, "Europe/Berlin", sc.TimeZone)
	require.Equal(t, "report.build", sc.Kind)
	require.True(t, sc.LastTick.IsZero(), "no tick yet, got %s", sc.LastTick)
	require.Equal(t, at(6, 0), sc.NextTick.UTC())
	js, err := json.Marshal(sc)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(js, &fields))
	require.Contains(t, fields, "last_tick")
	require.Nil(t, fields["last_tick"], "null until the first tick")
	require.Equal(t, "2026-01-01T06:00:00Z", fields["next_tick"])
	require.False(t, sc.Paused)
	require.Equal(t, store.PriorityHigh, sc.Job.Priority)
	require.JSONEq(t, `{"n":1}`, string(sc.Job.Payload))

	paused, err := a.PauseSchedule(ctx, "half-hourly")
	require.NoError(t, err)
	require.True(t, paused.Paused)
	clock.Set(at(6, 0))
	waitLastTick(t, st, "half-hourly", at(6, 0))
	list, err = a.Schedules(ctx)
	require.NoError(t, err)
	require.Equal(t, at(6, 0), list[0].LastTick.UTC(), "a tick passed while paused is a tick")
	js, err = json.Marshal(list[0])
	require.NoError(t, err)
	require.Contains(t, string(js), `"last_tick":"2026-01-01T06:00:00Z"`)
	clock.Set(at(6, 30))
	waitLastTick(t, st, "half-hourly", at(6, 30))
	require.Empty(t, periodicJobs(t, st, "report.build"), "a paused schedule fired jobs")

	resumed, err := a.ResumeSchedule(ctx, "half-hourly")
	require.NoError(t, err)
	require.False(t, resumed.Paused)
	require.Equal(t, at(7, 0), resumed.NextTick.UTC())
	clock.Set(at(7, 0))
	waitLastTick(t, st, "half-hourly", at(7, 0))
	require.Equal(t, []string{"2026-01-01T07:00:00Z"}, runAts(periodicJobs(t, st, "report.build"), time.UTC))

	clock.Set(at(7, 10))
	res, err := a.TriggerSchedule(ctx, "half-hourly")
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	rec, err := a.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, "report.build", rec.Kind)
	require.Equal(t, store.PriorityHigh, rec.Priority)
	require.Equal(t, "periodic:half-hourly:manual", rec.UniqueKey)
	require.Equal(t, ax.TriggerManual, rec.Metadata[ax.MetadataTrigger])
	require.Equal(t, at(7, 10), rec.ScheduledAt.UTC())
	state, err := st.PeriodicState(ctx, "half-hourly")
	require.NoError(t, err)
	require.Equal(t, at(7, 0), state.LastTick.UTC(), "a trigger is not a tick")

	for _, call := range []func() error{
		func() error { _, err := a.PauseSchedule(ctx, "nope"); return err },
		func() error { _, err := a.ResumeSchedule(ctx, "nope"); return err },
		func() error { _, err := a.TriggerSchedule(ctx, "nope"); return err },
	} {
		require.ErrorIs(t, call(), ax.ErrScheduleNotFound)
	}
	_, err = a.PauseSchedule(ctx, "")
	require.ErrorIs(t, err, ax.ErrInvalidSchedule)
}

// TestTriggerScheduleRunsTheHandler triggers a schedule whose ticks are
// far away and checks the handler sees the schedule and the trigger's
// instant, like a tick.
func TestTriggerScheduleRunsTheHandler(t *testing.T) {
	st := newMemstore()
	seen := make(chan *ax.Job, 1)
	s := newScheduler(t, st)
	require.NoError(t, s.Handle("yearly", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		seen <- j
		return nil
	})))
	require.NoError(t, s.Every("yearly", "@yearly", nil))
	start(t, s)
	waitDeclared(t, st, "yearly")
	before, err := st.Now(t.Context())
	require.NoError(t, err)
	res, err := s.Admin().TriggerSchedule(t.Context(), "yearly")
	require.NoError(t, err)
	j := recv(t, seen)
	require.Equal(t, res.ID, j.ID)
	require.Equal(t, "yearly", j.Schedule)
	require.True(t, j.Triggered(), "a manual run says so")
	require.False(t, j.Tick.Before(before), "Tick is the trigger's instant")
	require.True(t, j.ScheduledAt.Equal(j.Tick), "ScheduledAt %s, Tick %s", j.ScheduledAt, j.Tick)
}

// TestJobTriggered tells a manual run from a tick's job and from other
// jobs with the same metadata.
func TestJobTriggered(t *testing.T) {
	manual := map[string]string{ax.MetadataTrigger: ax.TriggerManual}
	cases := []struct {
		name string
		job  ax.Job
		want bool
	}{
		{"ManualRun", ax.Job{Schedule: "nightly", Metadata: manual}, true},
		{"Tick", ax.Job{Schedule: "nightly", Metadata: map[string]string{}}, false},
		{"NotPeriodic", ax.Job{Metadata: manual}, false},
		{"OtherValue", ax.Job{Schedule: "nightly", Metadata: map[string]string{ax.MetadataTrigger: "cron"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.job.Triggered())
		})
	}
}

// TestTriggerGuard: a second trigger while the first manual run is live
// inserts nothing and names that run; ForceTrigger inserts another; once
// the manual run has ended, a trigger runs again. On the old code every
// trigger inserted a job.
func TestTriggerGuard(t *testing.T) {
	st := newMemstore()
	_, err := st.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "nightly:eu", Spec: "@daily",
		Job: &store.InsertParams{Kind: "report.build", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3,
			Metadata: map[string]string{"team": "ops"}}})
	require.NoError(t, err)
	a := newAdmin(t, st)
	ctx := t.Context()

	first, err := a.TriggerSchedule(ctx, "nightly:eu")
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := a.TriggerSchedule(ctx, "nightly:eu")
	require.NoError(t, err)
	require.Equal(t, ax.ScheduleResult{ID: first.ID, Duplicate: true}, again, "the live manual run, nothing inserted")

	forced, err := a.TriggerSchedule(ctx, "nightly:eu", ax.ForceTrigger())
	require.NoError(t, err)
	require.False(t, forced.Duplicate)
	require.NotEqual(t, first.ID, forced.ID)
	rec, err := a.Get(ctx, forced.ID)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rec.UniqueKey, "periodic:nightly:eu:20"), rec.UniqueKey)
	require.Equal(t, map[string]string{"team": "ops", ax.MetadataTrigger: ax.TriggerManual}, rec.Metadata)

	_, err = a.CancelJobs(ctx, ax.JobFilter{IDs: []uuid.UUID{first.ID}})
	require.NoError(t, err)
	next, err := a.TriggerSchedule(ctx, "nightly:eu")
	require.NoError(t, err)
	require.False(t, next.Duplicate, "the previous manual run ended")
	rec, err = a.Get(ctx, next.ID)
	require.NoError(t, err)
	require.Equal(t, "periodic:nightly:eu:manual", rec.UniqueKey)

	_, err = a.TriggerSchedule(ctx, "nightly:eu", nil)
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	state, err := st.PeriodicState(ctx, "nightly:eu")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "ops"}, state.Job.Metadata, "the template is left alone")
}

// TestTriggerWithoutTemplate refuses a schedule declared without a job
// template (by an older AX).
func TestTriggerWithoutTemplate(t *testing.T) {
	st := newMemstore()
	_, err := st.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "old", Spec: "@daily"})
	require.NoError(t, err)
	_, err = newAdmin(t, st).TriggerSchedule(t.Context(), "old")
	require.ErrorIs(t, err, ax.ErrInvalidSchedule)
	list, err := newAdmin(t, st).Schedules(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Empty(t, list[0].Kind)
	require.Equal(t, "UTC", list[0].TimeZone)
}
