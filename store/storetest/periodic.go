package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testPeriodic checks the optional PeriodicStore: declarations, the last
// tick guard (older, equal and future ticks change nothing), atomic fire
// with the ticks' jobs, and racing fires yielding one job per tick.
func testPeriodic(t *testing.T, newStore NewStoreFunc) {
	t.Run("Declare", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		_, err := ps.PeriodicState(t.Context(), "report")
		require.ErrorIs(t, err, store.ErrNotFound)

		before := storeNow(t, st)
		d, err := ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "report", Spec: "0 6 * * *"})
		require.NoError(t, err)
		after := storeNow(t, st)
		require.True(t, d.Created)
		require.Empty(t, d.PreviousSpec)
		require.Equal(t, "report", d.State.Name)
		require.Equal(t, "0 6 * * *", d.State.Spec)
		requireBetween(t, before, after.Add(time.Microsecond), d.State.LastTick, "LastTick of a new schedule")
		require.False(t, store.Ticked(d.State.LastTick), "a declaration's LastTick %s reads as a tick", d.State.LastTick)
		requireBetween(t, before, after, d.Now, "Now")

		cases := []struct {
			name     string
			spec     string
			previous string
		}{
			{"SameSpec", "0 6 * * *", "0 6 * * *"},
			{"ChangedSpec", "0 7 * * *", "0 6 * * *"},
			{"ChangedBack", "0 6 * * *", "0 7 * * *"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				again, err := ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "report", Spec: c.spec})
				require.NoError(t, err)
				require.False(t, again.Created)
				require.Equal(t, c.previous, again.PreviousSpec)
				require.Equal(t, c.spec, again.State.Spec)
				requireTimeNear(t, d.State.LastTick, again.State.LastTick, 0, "a declaration keeps LastTick")
				got, err := ps.PeriodicState(t.Context(), "report")
				require.NoError(t, err)
				require.Equal(t, c.spec, got.Spec)
				requireTimeNear(t, d.State.LastTick, got.LastTick, 0)
			})
		}
		_, err = ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "", Spec: "x"})
		require.ErrorIs(t, err, store.ErrInvalidParams)
	})

	t.Run("Guard", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		base := storeNow(t, st).Truncate(time.Second).Add(-time.Hour)
		t1, t2, t3 := base, base.Add(time.Minute), base.Add(2*time.Minute)
		future := base.Add(2 * farFuture)

		// Each step fires ticks with fresh jobs and expects what was
		// applied and the stored LastTick afterwards.
		steps := []struct {
			name    string
			ticks   []time.Time
			applied []bool
			last    time.Time
		}{
			{"FirstTick", []time.Time{t1}, []bool{true}, t1},
			{"SameTick", []time.Time{t1}, []bool{false}, t1},
			{"OlderTick", []time.Time{t1.Add(-time.Minute)}, []bool{false}, t1},
			{"FutureTick", []time.Time{future}, []bool{false}, t1},
			{"Mixed", []time.Time{t1, t2, t3, future}, []bool{false, true, true, false}, t3},
			{"AllOld", []time.Time{t1, t2, t3}, []bool{false, false, false}, t3},
		}
		for _, s := range steps {
			t.Run(s.name, func(t *testing.T) {
				p := fireParams(t, "guard", s.ticks...)
				res, err := ps.FirePeriodic(t.Context(), p)
				require.NoError(t, err)
				require.Equal(t, s.applied, res.Applied)
				requireTimeNear(t, s.last, res.LastTick, storedTolerance)
				requireTimeNear(t, storeNow(t, st), res.Now, clockTolerance)
				for i, tk := range p.Ticks {
					if !s.applied[i] {
						require.Equal(t, store.InsertResult{}, res.Jobs[i], "tick %d", i)
						requireNotFound(t, st, tk.Job.ID)
						continue
					}
					require.Equal(t, store.InsertResult{ID: tk.Job.ID}, res.Jobs[i], "tick %d", i)
					j := get(t, st, tk.Job.ID)
					require.Equal(t, store.StateScheduled, j.State)
					require.Equal(t, tk.Job.UniqueKey, j.UniqueKey)
					requireTimeNear(t, tk.At, j.RunAt, storedTolerance)
				}
				got, err := ps.PeriodicState(t.Context(), "guard")
				require.NoError(t, err)
				requireTimeNear(t, s.last, got.LastTick, storedTolerance)
				require.Equal(t, p.Spec, got.Spec)
			})
		}
	})

	t.Run("DeclaredTicksStartAfterDeclaration", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		d, err := ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "fresh", Spec: "spec"})
		require.NoError(t, err)
		before := d.State.LastTick.Add(-time.Second)
		res, err := ps.FirePeriodic(t.Context(), fireParams(t, "fresh", before))
		require.NoError(t, err)
		require.Equal(t, []bool{false}, res.Applied, "a tick before the first declaration")

		next := d.State.LastTick.Add(10 * time.Millisecond)
		waitUntilStoreTime(t, st, next)
		res, err = ps.FirePeriodic(t.Context(), fireParams(t, "fresh", next))
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.Applied, "a due tick after the declaration")
		d, err = ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "fresh", Spec: "spec"})
		require.NoError(t, err)
		requireTimeNear(t, next, d.State.LastTick, storedTolerance, "a declaration keeps the fired tick")
	})

	t.Run("SkippedTickHasNoJob", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		base := storeNow(t, st).Truncate(time.Second).Add(-time.Hour)
		p := fireParams(t, "skip", base, base.Add(time.Minute))
		skipped := p.Ticks[0].Job.ID
		p.Ticks[0].Job = nil
		res, err := ps.FirePeriodic(t.Context(), p)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, res.Applied)
		require.Equal(t, store.InsertResult{}, res.Jobs[0])
		requireNotFound(t, st, skipped)
		get(t, st, p.Ticks[1].Job.ID)
		requireTimeNear(t, base.Add(time.Minute), res.LastTick, storedTolerance)
	})

	t.Run("GuardOutlivesJob", func(t *testing.T) {
		// The tick's job is cancelled, which frees its unique key: the
		// stored tick alone must still refuse the tick.
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		tick := storeNow(t, st).Truncate(time.Second).Add(-time.Minute)
		first := fireParams(t, "outlive", tick)
		res, err := ps.FirePeriodic(t.Context(), first)
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.Applied)
		control(t, st, first.Ticks[0].Job.ID, store.OpCancel)

		again := fireParams(t, "outlive", tick)
		res, err = ps.FirePeriodic(t.Context(), again)
		require.NoError(t, err)
		require.Equal(t, []bool{false}, res.Applied)
		requireNotFound(t, st, again.Ticks[0].Job.ID)
	})

	t.Run("HeldUniqueKey", func(t *testing.T) {
		// The tick's job has the default scope: a job of the schedule's
		// kind holding the key makes it a duplicate, one of another kind
		// does not.
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		tick := storeNow(t, st).Truncate(time.Second).Add(-time.Minute)
		p := fireParams(t, "held", tick)
		key := p.Ticks[0].Job.UniqueKey
		insertOne(t, st, "other", notDue, withUniqueKey(key))
		holder := insertOne(t, st, "held", notDue, withUniqueKey(key))
		res, err := ps.FirePeriodic(t.Context(), p)
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.Applied)
		require.Equal(t, store.InsertResult{ID: holder, Duplicate: true}, res.Jobs[0])
		requireNotFound(t, st, p.Ticks[0].Job.ID)
	})

	t.Run("Atomic", func(t *testing.T) {
		// The second tick's job reuses an existing job's ID, so its
		// insert fails: the first tick's job and the tick stay unwritten.
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		existing := insertOne(t, st, "existing")
		base := storeNow(t, st).Truncate(time.Second).Add(-time.Hour)
		first := fireParams(t, "atomic", base)
		_, err := ps.FirePeriodic(t.Context(), first)
		require.NoError(t, err)

		p := fireParams(t, "atomic", base.Add(time.Minute), base.Add(2*time.Minute))
		p.Ticks[1].Job.ID = existing
		_, err = ps.FirePeriodic(t.Context(), p)
		require.Error(t, err)
		requireNotFound(t, st, p.Ticks[0].Job.ID)
		require.Equal(t, "existing", get(t, st, existing).Kind)
		got, err := ps.PeriodicState(t.Context(), "atomic")
		require.NoError(t, err)
		requireTimeNear(t, base, got.LastTick, storedTolerance, "LastTick moved by a failed fire")
	})

	t.Run("Invalid", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		tick := storeNow(t, st).Truncate(time.Second).Add(-time.Minute)
		cases := []struct {
			name string
			edit func(p *store.FirePeriodicParams)
		}{
			{"EmptyName", func(p *store.FirePeriodicParams) { p.Name = "" }},
			{"NoTicks", func(p *store.FirePeriodicParams) { p.Ticks = nil }},
			{"ZeroTick", func(p *store.FirePeriodicParams) { p.Ticks[0].At = time.Time{} }},
			{"NotAscending", func(p *store.FirePeriodicParams) { p.Ticks[1].At = p.Ticks[0].At }},
			{"InvalidJob", func(p *store.FirePeriodicParams) { p.Ticks[1].Job.MaxAttempts = 0 }},
			{"InvalidPayload", func(p *store.FirePeriodicParams) { p.Ticks[1].Job.Payload = []byte("{") }},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				p := fireParams(t, "invalid", tick, tick.Add(time.Second))
				c.edit(p)
				_, err := ps.FirePeriodic(t.Context(), p)
				require.ErrorIs(t, err, store.ErrInvalidParams)
				_, err = ps.PeriodicState(t.Context(), "invalid")
				require.ErrorIs(t, err, store.ErrNotFound, "state created by an invalid fire")
			})
		}
	})

	t.Run("Race", func(t *testing.T) {
		// 16 hosts fire the same 20 ticks, in order, each with its own
		// jobs and no unique key: only the stored tick guards, and every
		// tick must be applied by exactly one of them.
		const hosts, ticks = 16, 20
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		base := storeNow(t, st).Truncate(time.Second).Add(-time.Hour)
		var (
			mu      sync.Mutex
			winners = make(map[time.Time][]uuid.UUID)
			wg      sync.WaitGroup
		)
		ctx := ctxTimeout(t)
		for range hosts {
			wg.Go(func() {
				for k := range ticks {
					at := base.Add(time.Duration(k) * time.Second)
					p := &store.FirePeriodicParams{Name: "race", Spec: "@every 1s", Ticks: []store.PeriodicTick{{
						At: at, Job: &store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "race", Priority: store.PriorityNormal, MaxAttempts: 1, RunAt: at},
					}}}
					res, err := ps.FirePeriodic(ctx, p)
					if err != nil {
						t.Errorf("fire tick %d: %v", k, err)
						return
					}
					if res.Applied[0] {
						mu.Lock()
						winners[at] = append(winners[at], res.Jobs[0].ID)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		require.Len(t, winners, ticks, "ticks applied")
		for at, ids := range winners {
			require.Len(t, ids, 1, "tick %s applied %d times", at, len(ids))
			get(t, st, ids[0])
		}
		if l, ok := st.(store.Lister); ok {
			jobs, err := l.List(t.Context(), &store.ListParams{Kind: "race", Limit: 10 * ticks})
			require.NoError(t, err)
			require.Len(t, jobs, ticks, "jobs inserted")
		}
	})
}

// fireParams returns params firing ticks of schedule name, each with a
// fresh job keyed like AX's periodic jobs.
func fireParams(t *testing.T, name string, ticks ...time.Time) *store.FirePeriodicParams {
	t.Helper()
	p := &store.FirePeriodicParams{Name: name, Spec: "spec of " + name}
	for _, at := range ticks {
		job := params(t, name, withRunAt(at), withUniqueKey("periodic:"+name+":"+at.UTC().Format(time.RFC3339)))
		p.Ticks = append(p.Ticks, store.PeriodicTick{At: at, Job: &job})
	}
	return p
}
