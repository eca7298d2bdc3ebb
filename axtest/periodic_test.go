package axtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

type digestArgs struct {
	Team string `json:"team"`
}

func (digestArgs) Kind() string { return "digest" }

// digests registers a digest handler on s that records the tick of each
// job it runs ("15:04" on the test clock, in UTC).
func digests(t *testing.T, s *ax.Scheduler) *[]string {
	t.Helper()
	var ran []string
	require.NoError(t, ax.HandleArgs(s, func(_ context.Context, j *ax.Job, a digestArgs) error {
		if j.Schedule != "digest" || a.Team != "ops" {
			return ax.Permanent(errors.New("not the schedule's job"))
		}
		ran = append(ran, j.Tick.UTC().Format("15:04"))
		return nil
	}))
	return &ran
}

// TestPeriodicFiresOnTheClock: Work fires the ticks due at the test
// clock's time (counted from the Every call) and runs their jobs, by the
// schedule's misfire policy for the ticks one Work finds; no Work, no
// tick, and a tick fires once.
func TestPeriodicFiresOnTheClock(t *testing.T) {
	tests := []struct {
		name  string
		spec  string
		opts  []ax.PeriodicOption
		steps []time.Duration // each moves the clock, then Work
		want  [][]string      // ticks run by each step's Work
	}{
		{"one tick", "@hourly", nil, []time.Duration{time.Hour}, [][]string{{"10:00"}}},
		{"before the tick", "@hourly", nil, []time.Duration{59 * time.Minute}, [][]string{nil}},
		{"a tick fires once", "@hourly", nil, []time.Duration{time.Hour, 0, 59 * time.Minute}, [][]string{{"10:00"}, nil, nil}},
		{"one step per tick", "@hourly", nil, []time.Duration{time.Hour, time.Hour, time.Hour},
			[][]string{{"10:00"}, {"11:00"}, {"12:00"}}},
		{"ticks a Work finds run once", "@hourly", nil, []time.Duration{3 * time.Hour}, [][]string{{"12:00"}}},
		{"or all of them", "@hourly", []ax.PeriodicOption{ax.Misfire(ax.MisfireRunAll(5))},
			[]time.Duration{3 * time.Hour}, [][]string{{"10:00", "11:00", "12:00"}}},
		{"or those on time", "@hourly", []ax.PeriodicOption{ax.Misfire(ax.MisfireSkip)},
			[]time.Duration{90 * time.Minute, 30 * time.Minute}, [][]string{nil, {"11:00"}}},
		{"daily, next day", "30 3 * * *", nil, []time.Duration{18 * time.Hour, 30 * time.Minute},
			[][]string{nil, {"03:30"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clock := axtest.NewScheduler(t, ax.Config{})
			ran := digests(t, s)
			require.NoError(t, s.Every("digest", tt.spec, digestArgs{Team: "ops"}, tt.opts...))
			for i, d := range tt.steps {
				clock.Advance(d)
				*ran = nil
				n := axtest.Work(t, s)
				require.Equal(t, tt.want[i], *ran, "step %d (+%s)", i, d)
				require.Len(t, tt.want[i], n, "step %d: attempts", i)
			}
		})
	}
}

// TestPeriodicScheduleDeclaredLater: a schedule given to Every after
// earlier Work calls counts from its own Every call, and RunOne fires
// ticks as Work does.
func TestPeriodicScheduleDeclaredLater(t *testing.T) {
	s, clock := axtest.NewScheduler(t, ax.Config{})
	ran := digests(t, s)
	clock.Advance(25 * time.Minute)
	require.Zero(t, axtest.Work(t, s))
	require.NoError(t, s.Every("digest", "*/30 * * * *", digestArgs{Team: "ops"}))
	clock.Advance(5 * time.Minute)
	require.True(t, axtest.RunOne(t, s), "the 09:30 tick fires and its job runs")
	require.False(t, axtest.RunOne(t, s))
	require.Equal(t, []string{"09:30"}, *ran)
	axtest.RequireScheduled[digestArgs](t, s, axtest.State(ax.StateSucceeded),
		axtest.UniqueKey("periodic:digest:2030-01-01T09:30:00Z"), axtest.RunAt(axtest.Epoch.Add(30*time.Minute)))
}

// TestPeriodicPausedSchedule: an operator's pause (Admin.PauseSchedule)
// lets the ticks pass without jobs on the test clock too, until resumed.
func TestPeriodicPausedSchedule(t *testing.T) {
	s, clock := axtest.NewScheduler(t, ax.Config{})
	ran := digests(t, s)
	require.NoError(t, s.Every("digest", "@hourly", digestArgs{Team: "ops"}))
	require.Zero(t, axtest.Work(t, s), "declares the schedule")
	_, err := s.Admin().PauseSchedule(t.Context(), "digest")
	require.NoError(t, err)
	clock.Advance(time.Hour)
	require.Zero(t, axtest.Work(t, s))
	axtest.RequireNotScheduled[digestArgs](t, s, axtest.State(ax.StateSucceeded))
	_, err = s.Admin().ResumeSchedule(t.Context(), "digest")
	require.NoError(t, err)
	clock.Advance(time.Hour)
	require.Equal(t, 1, axtest.Work(t, s))
	require.Equal(t, []string{"11:00"}, *ran)
}

// refusingDeclare is a memstore whose DeclarePeriodic fails.
type refusingDeclare struct{ *memstore.Store }

var errRefused = errors.New("declare refused")

func (refusingDeclare) DeclarePeriodic(context.Context, *store.DeclarePeriodicParams) (*store.PeriodicDeclaration, error) {
	return nil, errRefused
}

// TestStartDeclaresSchedules: when Start returns, the schedules given to
// Every before it are in the store, counting from the start; a store that
// refuses them fails Start, which says which schedule.
func TestStartDeclaresSchedules(t *testing.T) {
	tests := []struct {
		name    string
		refuse  bool
		wantErr error
	}{
		{"declared", false, nil},
		{"refused", true, errRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := axtest.NewClock()
			var st store.Store = memstore.New(memstore.WithClock(clock.Now))
			if tt.refuse {
				st = refusingDeclare{st.(*memstore.Store)}
			}
			s, err := ax.New(ax.Config{Store: st, Clock: clock.Now})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
			require.NoError(t, s.Every("digest", "@hourly", digestArgs{Team: "ops"}))

			err = s.Start(t.Context())
			require.ErrorIs(t, err, tt.wantErr)
			if tt.wantErr != nil {
				require.ErrorContains(t, err, `periodic schedule "digest"`)
				return
			}
			scheds, err := s.Admin().Schedules(t.Context())
			require.NoError(t, err)
			require.Len(t, scheds, 1)
			require.Equal(t, "digest", scheds[0].Kind)
			require.True(t, scheds[0].LastTick.IsZero(), "declared at Epoch, no tick yet: %s", scheds[0].LastTick)
			require.True(t, scheds[0].NextTick.Equal(axtest.Epoch.Add(time.Hour)))
		})
	}
}

// TestPeriodicKnownToTheStore: a schedule the store already knows (another
// host fired it, at 07:00) resumes from its stored last tick, not from the
// Every call: the first Work finds the 08:00 and 09:00 ticks missed and,
// by the default misfire policy, runs the latest.
func TestPeriodicKnownToTheStore(t *testing.T) {
	s, clock := axtest.NewScheduler(t, ax.Config{})
	ran := digests(t, s)
	ps := s.Store().(store.PeriodicStore)
	_, err := ps.FirePeriodic(t.Context(), &store.FirePeriodicParams{Name: "digest", Spec: "@hourly",
		Ticks: []store.PeriodicTick{{At: axtest.Epoch.Add(-2 * time.Hour)}}})
	require.NoError(t, err)
	require.NoError(t, s.Every("digest", "@hourly", digestArgs{Team: "ops"}))
	require.Equal(t, 1, axtest.Work(t, s))
	require.Equal(t, []string{"09:00"}, *ran)
	clock.Advance(time.Hour)
	require.Equal(t, 1, axtest.Work(t, s))
	require.Equal(t, []string{"09:00", "10:00"}, *ran)
}
