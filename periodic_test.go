package ax_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// frozenClock is a store clock that moves only when the test sets it, so
// each step crosses exactly the ticks the test means to.
type frozenClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *frozenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *frozenClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = t
}

// periodicHost returns a started Scheduler on st that declares schedule
// name with spec and opts, stopped at the end of the test.
func periodicHost(t *testing.T, st store.Store, name, spec string, opts []ax.PeriodicOption, edit ...func(*ax.Config)) *ax.Scheduler {
	t.Helper()
	s := newScheduler(t, st, append([]func(*ax.Config){func(c *ax.Config) { c.PollInterval = 10 * time.Millisecond }}, edit...)...)
	require.NoError(t, s.Every(name, spec, nil, opts...))
	start(t, s)
	return s
}

// waitPeriodic waits until the stored state of name satisfies ok.
func waitPeriodic(t *testing.T, st store.Store, name, what string, ok func(*store.PeriodicState) bool) *store.PeriodicState {
	t.Helper()
	ps := st.(store.PeriodicStore)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := ps.PeriodicState(context.Background(), name)
		if err == nil && ok(got) {
			return got
		}
		if !errors.Is(err, store.ErrNotFound) {
			require.NoError(t, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %q: %s: not reached (state %+v)", name, what, got)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitDeclared waits until some host declared name.
func waitDeclared(t *testing.T, st store.Store, name string) *store.PeriodicState {
	t.Helper()
	return waitPeriodic(t, st, name, "declared", func(*store.PeriodicState) bool { return true })
}

// waitLastTick waits until name's stored last tick is tick.
func waitLastTick(t *testing.T, st store.Store, name string, tick time.Time) {
	t.Helper()
	waitPeriodic(t, st, name, "last tick "+tick.String(), func(s *store.PeriodicState) bool { return s.LastTick.Equal(tick) })
}

// periodicJobs returns the jobs of kind, oldest tick first.
func periodicJobs(t *testing.T, st *memstore.Store, kind string) []*store.JobRecord {
	t.Helper()
	jobs, err := st.List(context.Background(), &store.ListParams{Kind: kind, Limit: 10000})
	require.NoError(t, err)
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].RunAt.Before(jobs[b].RunAt) })
	return jobs
}

// runAts returns the jobs' RunAt in RFC 3339 with the zone's offset.
func runAts(jobs []*store.JobRecord, loc *time.Location) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.RunAt.In(loc).Format(time.RFC3339)
	}
	return out
}

// TestEveryOneJobPerTickAcrossHosts runs three Schedulers declaring the
// same schedule on one store, steps the store's clock over 60 ticks, and
// counts jobs and executions per tick.
func TestEveryOneJobPerTickAcrossHosts(t *testing.T) {
	const hosts, ticks = 3, 60
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 500_000_000, time.UTC)
	clock := &frozenClock{at: t0}
	st := newMemstore(memstore.WithClock(clock.Now))
	var (
		mu   sync.Mutex
		runs = map[string]int{} // unique key → executions
	)
	count := func(_ context.Context, j *ax.Job) error {
		mu.Lock()
		runs[j.UniqueKey]++
		mu.Unlock()
		return nil
	}
	opts := []ax.PeriodicOption{ax.Misfire(ax.MisfireRunAll(10))}
	for range hosts - 1 {
		s := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = 10 * time.Millisecond })
		require.NoError(t, s.Handle("heartbeat", ax.HandlerFunc(count)))
		require.NoError(t, s.Every("heartbeat", "@every 1s", nil, opts...))
		start(t, s)
	}
	// The last host declares the schedule once running.
	last := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = 10 * time.Millisecond })
	require.NoError(t, last.Handle("heartbeat", ax.HandlerFunc(count)))
	start(t, last)
	require.NoError(t, last.Every("heartbeat", "@every 1s", nil, opts...))
	waitDeclared(t, st, "heartbeat")
	for k := 1; k <= ticks; k++ {
		tick := t0.Truncate(time.Second).Add(time.Duration(k) * time.Second)
		clock.Set(tick.Add(time.Millisecond))
		waitLastTick(t, st, "heartbeat", tick)
	}
	jobs := periodicJobs(t, st, "heartbeat")
	perTick := map[string]int{}
	for _, j := range jobs {
		perTick[j.RunAt.UTC().Format(time.RFC3339)]++
		waitState(t, st, j.ID, store.StateSucceeded)
	}
	duplicates := len(jobs) - len(perTick)
	mu.Lock()
	executions := 0
	for _, n := range runs {
		executions += n
	}
	mu.Unlock()
	t.Logf("%d hosts: ticks fired %d, expected %d; jobs %d, duplicates %d; executions %d", hosts, len(perTick), ticks, len(jobs), duplicates, executions)
	require.Len(t, perTick, ticks)
	require.Zero(t, duplicates)
	require.Equal(t, ticks, executions)
	for k := 1; k <= ticks; k++ {
		tick := t0.Truncate(time.Second).Add(time.Duration(k) * time.Second).Format(time.RFC3339)
		require.Equal(t, 1, perTick[tick], "tick %s", tick)
	}
}

// TestEveryClockSkew runs hosts whose clocks are 30 s off the store's on a
// real clock: no tick fires early (a job is never created before its
// tick), none twice, none late by the skew.
func TestEveryClockSkew(t *testing.T) {
	tests := []struct {
		name  string
		skews []time.Duration
	}{
		{"ahead", []time.Duration{30 * time.Second}},
		{"behind", []time.Duration{-30 * time.Second}},
		{"mixed hosts", []time.Duration{0, 30 * time.Second, -30 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const want = 3
			st := newMemstore()
			for _, skew := range tt.skews {
				periodicHost(t, st, "skew", "* * * * * *", nil, func(c *ax.Config) {
					c.Clock = func() time.Time { return time.Now().Add(skew) }
				})
			}
			first := waitDeclared(t, st, "skew").LastTick.Truncate(time.Second)
			waitPeriodic(t, st, "skew", "3 ticks", func(s *store.PeriodicState) bool {
				return !s.LastTick.Before(first.Add(want * time.Second))
			})
			jobs := periodicJobs(t, st, "skew")
			seen := map[time.Time]bool{}
			for _, j := range jobs[:want] {
				lag := j.CreatedAt.Sub(j.RunAt)
				require.GreaterOrEqual(t, lag, time.Duration(0), "job created %s before its tick", -lag)
				require.Less(t, lag, 2*time.Second, "job created %s after its tick", lag)
				require.False(t, seen[j.RunAt], "tick %s fired twice", j.RunAt)
				seen[j.RunAt] = true
			}
			for i := 1; i < len(jobs); i++ {
				require.Equal(t, time.Second, jobs[i].RunAt.Sub(jobs[i-1].RunAt), "ticks not consecutive")
			}
		})
	}
}

// TestEveryMisfire stops the only host on a Wednesday, brings another up
// after Sundays passed, and checks the weekly schedule's misfire policy:
// a restart never loses a run unless the policy says skip.
func TestEveryMisfire(t *testing.T) {
	wed := time.Date(2026, 1, 7, 12, 0, 0, 0, time.UTC)
	sun := func(day int) time.Time { return time.Date(2026, 1, day, 0, 0, 0, 0, time.UTC) }
	mon := time.Date(2026, 1, 26, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		policy   ax.MisfirePolicy
		back     time.Time
		lastTick time.Time
		want     []string
	}{
		{"run once", ax.MisfireRunOnce, mon, sun(25), []string{"2026-01-25T00:00:00Z"}},
		{"skip", ax.MisfireSkip, mon, sun(25), []string{}},
		{"skip within grace", ax.MisfireSkip, sun(25).Add(30 * time.Second), sun(25), []string{"2026-01-25T00:00:00Z"}},
		{"run all", ax.MisfireRunAll(10), mon, sun(25), []string{"2026-01-11T00:00:00Z", "2026-01-18T00:00:00Z", "2026-01-25T00:00:00Z"}},
		{"run all bounded", ax.MisfireRunAll(2), mon, sun(25), []string{"2026-01-18T00:00:00Z", "2026-01-25T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &frozenClock{at: wed}
			st := newMemstore(memstore.WithClock(clock.Now))
			opts := []ax.PeriodicOption{ax.Misfire(tt.policy)}
			first := periodicHost(t, st, "weekly", "0 0 * * 0", opts)
			waitDeclared(t, st, "weekly")
			require.NoError(t, first.Stop(context.Background()))

			clock.Set(tt.back)
			periodicHost(t, st, "weekly", "0 0 * * 0", opts)
			waitLastTick(t, st, "weekly", tt.lastTick)
			require.Equal(t, tt.want, runAts(periodicJobs(t, st, "weekly"), time.UTC))
		})
	}
}

// TestEveryDST fires schedules in America/New_York across DST transitions
// with an injected store clock: every tick of the period fires (MisfireRunAll),
// and the ticks are the documented ones.
func TestEveryDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	tests := []struct {
		name     string
		spec     string
		from, to time.Time
		want     []string
	}{
		{"spring gap runs at 03:00", "30 2 * * *", time.Date(2026, 3, 7, 12, 0, 0, 0, ny), time.Date(2026, 3, 9, 12, 0, 0, 0, ny),
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"fall repeat runs once", "30 1 * * *", time.Date(2026, 10, 31, 12, 0, 0, 0, ny), time.Date(2026, 11, 2, 12, 0, 0, 0, ny),
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"hourly spring has no 02:30", "30 * * * *", time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 8, 4, 0, 0, 0, ny),
			[]string{"2026-03-08T00:30:00-05:00", "2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"}},
		{"hourly fall runs both 01:30", "30 * * * *", time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 1, 2, 45, 0, 0, ny),
			[]string{"2026-11-01T00:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &frozenClock{at: tt.from}
			st := newMemstore(memstore.WithClock(clock.Now))
			periodicHost(t, st, "dst", tt.spec, []ax.PeriodicOption{ax.Location(ny), ax.Misfire(ax.MisfireRunAll(100))})
			waitDeclared(t, st, "dst")
			clock.Set(tt.to)
			last, err := time.Parse(time.RFC3339, tt.want[len(tt.want)-1])
			require.NoError(t, err)
			waitLastTick(t, st, "dst", last)
			require.Equal(t, tt.want, runAts(periodicJobs(t, st, "dst"), ny))
		})
	}
}

// TestEveryChangedAndRemovedSchedules deploys a new version: "report"
// changes from hourly to half-hourly (its 10:00 tick, already fired, must
// not fire again) and "cleanup" is removed (it must stop firing).
func TestEveryChangedAndRemovedSchedules(t *testing.T) {
	at := func(h, m int) time.Time { return time.Date(2026, 1, 1, h, m, 0, 0, time.UTC) }
	clock := &frozenClock{at: at(9, 59)}
	st := newMemstore(memstore.WithClock(clock.Now))

	v1 := periodicHost(t, st, "report", "0 * * * *", nil)
	require.NoError(t, v1.Every("cleanup", "0 * * * *", nil))
	waitDeclared(t, st, "report")
	waitDeclared(t, st, "cleanup")
	clock.Set(at(10, 0).Add(time.Millisecond))
	waitLastTick(t, st, "report", at(10, 0))
	waitLastTick(t, st, "cleanup", at(10, 0))
	require.NoError(t, v1.Stop(context.Background()))

	core, logs := observer.New(zapcore.InfoLevel)
	periodicHost(t, st, "report", "0,30 * * * *", nil, func(c *ax.Config) { c.Logger = zap.New(core) })
	waitPeriodic(t, st, "report", "new spec recorded", func(s *store.PeriodicState) bool { return s.Spec == "0,30 * * * *" })
	changed := logs.FilterMessage("periodic schedule spec changed").All()
	require.Len(t, changed, 1)
	require.Equal(t, "0 * * * *", changed[0].ContextMap()["previous_spec"])

	for _, tick := range []time.Time{at(10, 30), at(11, 0)} {
		clock.Set(tick.Add(time.Millisecond))
		waitLastTick(t, st, "report", tick)
	}
	require.Equal(t, []string{"2026-01-01T10:00:00Z", "2026-01-01T10:30:00Z", "2026-01-01T11:00:00Z"},
		runAts(periodicJobs(t, st, "report"), time.UTC))
	require.Equal(t, []string{"2026-01-01T10:00:00Z"}, runAts(periodicJobs(t, st, "cleanup"), time.UTC), "removed schedule fired")
	waitLastTick(t, st, "cleanup", at(10, 0))
}

// TestEveryJobOptions checks the jobs carry the schedule's kind, payload,
// options and key.
func TestEveryJobOptions(t *testing.T) {
	clock := &frozenClock{at: time.Date(2026, 1, 1, 5, 59, 59, 0, time.UTC)}
	st := newMemstore(memstore.WithClock(clock.Now))
	s := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = 10 * time.Millisecond })
	require.NoError(t, s.Every("daily-report", "0 6 * * *", map[string]string{"team": "ops"},
		ax.JobKind("report.build"), ax.Priority(ax.High), ax.MaxAttempts(4), ax.Metadata(map[string]string{"owner": "ops"})))
	start(t, s)
	waitDeclared(t, st, "daily-report")
	clock.Set(time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC))
	waitLastTick(t, st, "daily-report", time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC))
	jobs := periodicJobs(t, st, "report.build")
	require.Len(t, jobs, 1)
	j := jobs[0]
	require.JSONEq(t, `{"team":"ops"}`, string(j.Payload))
	require.Equal(t, store.PriorityHigh, j.Priority)
	require.Equal(t, 4, j.MaxAttempts)
	require.Equal(t, map[string]string{"owner": "ops"}, j.Metadata)
	require.Equal(t, "periodic:daily-report:2026-01-01T06:00:00Z", j.UniqueKey)
}

// TestEveryRejectsBadInput checks each bad Every call returns a matchable
// error and declares nothing.
func TestEveryRejectsBadInput(t *testing.T) {
	tests := []struct {
		name    string
		sched   string
		spec    string
		payload any
		opts    []ax.PeriodicOption
		want    []error
	}{
		{"empty name", "", "@daily", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"overlong name", strings.Repeat("n", store.MaxKindLength+1), "@daily", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"empty spec", "sched", "", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"invalid spec", "sched", "every day at six", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"four fields", "sched", "0 6 * *", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"seven fields", "sched", "0 0 6 * * * *", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"out of range", "sched", "0 25 * * *", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"unknown zone", "sched", "CRON_TZ=Mars/Olympus 0 6 * * *", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"zone twice", "sched", "CRON_TZ=Europe/Paris 0 6 * * *", nil, []ax.PeriodicOption{ax.Location(time.UTC)}, []error{ax.ErrInvalidSchedule}},
		{"never fires", "sched", "0 0 30 2 *", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"zero misfire bound", "sched", "@daily", nil, []ax.PeriodicOption{ax.Misfire(ax.MisfireRunAll(0))}, []error{ax.ErrInvalidOption}},
		{"negative misfire bound", "sched", "@daily", nil, []ax.PeriodicOption{ax.Misfire(ax.MisfireRunAll(-1))}, []error{ax.ErrInvalidOption}},
		{"huge misfire bound", "sched", "@daily", nil, []ax.PeriodicOption{ax.Misfire(ax.MisfireRunAll(store.MaxPeriodicTicks + 1))}, []error{ax.ErrInvalidOption}},
		{"nil location", "sched", "@daily", nil, []ax.PeriodicOption{ax.Location(nil)}, []error{ax.ErrInvalidOption}},
		{"nil option", "sched", "@daily", nil, []ax.PeriodicOption{nil}, []error{ax.ErrInvalidOption}},
		{"bad priority", "sched", "@daily", nil, []ax.PeriodicOption{ax.Priority(9)}, []error{ax.ErrInvalidOption}},
		{"empty job kind", "sched", "@daily", nil, []ax.PeriodicOption{ax.JobKind("")}, []error{ax.ErrInvalidKind}},
		{"unencodable payload", "sched", "@daily", make(chan int), nil, []error{ax.ErrInvalidPayload}},
		// Defect 10 of the hardening issue: robfig/cron rounds these up to
		// one second; Every refuses them.
		{"every zero", "sched", "@every 0s", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"every negative", "sched", "@every -1s", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"every below a second", "sched", "@every 500ms", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"every fractional seconds", "sched", "@every 1500ms", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"every zoned zero", "sched", "CRON_TZ=Europe/Paris @every 0s", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"name invalid UTF-8", "sched\xff", "@daily", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"name NUL", "sched\x00", "@daily", nil, nil, []error{ax.ErrInvalidSchedule}},
		{"job kind invalid UTF-8", "sched", "@daily", nil, []ax.PeriodicOption{ax.JobKind("k\xff")}, []error{ax.ErrInvalidKind}},
		{"metadata NUL", "sched", "@daily", nil, []ax.PeriodicOption{ax.Metadata(map[string]string{"k": "\x00"})}, []error{ax.ErrInvalidOption}},
		// Each tick's job would pass for a manual run (Job.Triggered).
		{"manual-run marker", "sched", "@daily", nil, []ax.PeriodicOption{ax.Metadata(map[string]string{ax.MetadataTrigger: ax.TriggerManual})}, []error{ax.ErrInvalidOption}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newMemstore()
			s := newScheduler(t, st)
			err := s.Every(tt.sched, tt.spec, tt.payload, tt.opts...)
			for _, want := range tt.want {
				require.ErrorIs(t, err, want)
			}
			// Nothing was declared: a valid schedule of the name is taken.
			require.NoError(t, s.Every("sched", "@daily", nil))
			start(t, s)
			waitDeclared(t, st, "sched")
			counts, err := st.CountJobs(context.Background())
			require.NoError(t, err)
			require.Empty(t, counts, "nothing stored")
		})
	}
}

// TestEveryDuplicateName checks a name is declared once per Scheduler,
// whether the spec differs or not.
func TestEveryDuplicateName(t *testing.T) {
	s := newScheduler(t, newMemstore())
	require.NoError(t, s.Every("report", "@daily", nil))
	for _, spec := range []string{"@hourly", "@daily"} {
		err := s.Every("report", spec, nil)
		require.ErrorIs(t, err, ax.ErrDuplicateSchedule, spec)
		require.ErrorIs(t, err, ax.ErrInvalidSchedule, spec)
	}
}

// TestEveryAfterStop checks Every returns ErrSchedulerClosed after Stop.
func TestEveryAfterStop(t *testing.T) {
	s := newScheduler(t, newMemstore())
	start(t, s)
	require.NoError(t, s.Stop(context.Background()))
	require.ErrorIs(t, s.Every("report", "@daily", nil), ax.ErrSchedulerClosed)
}

// TestEveryNeedsPeriodicStore checks a store without store.PeriodicStore
// is refused.
func TestEveryNeedsPeriodicStore(t *testing.T) {
	plain := struct{ store.Store }{newMemstore()}
	s := newScheduler(t, plain)
	require.ErrorIs(t, s.Every("report", "@daily", nil), ax.ErrPeriodicUnsupported)
}
