package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestPeriodicAcrossStores fires the same ticks from two Stores with their
// own pools on one database, as two hosts would, and reads the state back
// through a third Store opened afterwards.
func TestPeriodicAcrossStores(t *testing.T) {
	t.Parallel()
	const perStore, ticks = 8, 25
	dsn := pgtest.DSN(t)
	open := func() *pgstore.Store {
		s, err := pgstore.New(ctxT(t), pgtest.PoolFor(t, dsn))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	hosts := []*pgstore.Store{open(), open()}
	now, err := hosts[0].Now(ctxT(t))
	require.NoError(t, err)
	base := now.Truncate(time.Second).Add(-time.Hour)

	var (
		mu      sync.Mutex
		applied = map[time.Time]int{}
		wg      sync.WaitGroup
	)
	ctx := ctxT(t)
	for _, h := range hosts {
		for range perStore {
			wg.Go(func() {
				for k := range ticks {
					at := base.Add(time.Duration(k) * time.Second)
					p := job("pg.periodic")
					p.RunAt, p.UniqueKey = at, "periodic:pg:"+at.Format(time.RFC3339)
					res, err := h.FirePeriodic(ctx, &store.FirePeriodicParams{
						Name: "pg", Spec: "@every 1s", Ticks: []store.PeriodicTick{{At: at, Job: &p}}})
					if err != nil {
						t.Errorf("fire %s: %v", at, err)
						return
					}
					if res.Applied[0] {
						mu.Lock()
						applied[at]++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	require.Len(t, applied, ticks)
	for at, n := range applied {
		require.Equal(t, 1, n, "tick %s applied %d times", at, n)
	}

	later := open()
	st, err := later.PeriodicState(ctxT(t), "pg")
	require.NoError(t, err)
	require.True(t, st.LastTick.Equal(base.Add((ticks-1)*time.Second)), "last tick %s", st.LastTick)
	d, err := later.DeclarePeriodic(ctxT(t), &store.DeclarePeriodicParams{Name: "pg", Spec: "@every 2s"})
	require.NoError(t, err)
	require.False(t, d.Created)
	require.Equal(t, "@every 1s", d.PreviousSpec)
	require.True(t, d.State.LastTick.Equal(st.LastTick), "a declaration moved the last tick")
	jobs, err := later.List(ctxT(t), &store.ListParams{Kind: "pg.periodic", Limit: 1000})
	require.NoError(t, err)
	require.Len(t, jobs, ticks)
	_, err = later.PeriodicState(ctxT(t), "unknown-"+uuid.NewString())
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestPeriodicNothingAppliedCreatesNothing checks a fire of an unknown
// schedule whose only tick is in the future leaves no row behind.
func TestPeriodicNothingAppliedCreatesNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	now, err := s.Now(ctxT(t))
	require.NoError(t, err)
	p := job("pg.future")
	res, err := s.FirePeriodic(context.Background(), &store.FirePeriodicParams{
		Name: "future", Ticks: []store.PeriodicTick{{At: now.Add(time.Hour), Job: &p}}})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, res.Applied)
	_, err = s.PeriodicState(ctxT(t), "future")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestPeriodicSchedulersOnPostgres runs three ax Schedulers, clocks at 0,
// +30 s and -30 s from the database's, declaring one every-second schedule
// on one database: each tick yields exactly one job, none before its tick.
func TestPeriodicSchedulersOnPostgres(t *testing.T) {
	t.Parallel()
	const want = 3
	st := newStore(t)
	for _, skew := range []time.Duration{0, 30 * time.Second, -30 * time.Second} {
		s, err := ax.New(ax.Config{Store: st, PollInterval: 50 * time.Millisecond,
			Clock: func() time.Time { return time.Now().Add(skew) }})
		require.NoError(t, err)
		require.NoError(t, s.Every("pg.tick", "* * * * * *", nil))
		require.NoError(t, s.Start(ctxT(t)))
		t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	}
	var first time.Time
	deadline := time.Now().Add(20 * time.Second)
	for {
		state, err := st.PeriodicState(ctxT(t), "pg.tick")
		if err == nil && first.IsZero() {
			first = state.LastTick.Truncate(time.Second)
		}
		if err == nil && !state.LastTick.Before(first.Add(want*time.Second)) {
			break
		}
		require.True(t, time.Now().Before(deadline), "ticks did not fire: %v %+v", err, state)
		time.Sleep(10 * time.Millisecond)
	}
	jobs, err := st.List(ctxT(t), &store.ListParams{Kind: "pg.tick", Limit: 100})
	require.NoError(t, err)
	seen := map[time.Time]bool{}
	for _, j := range jobs {
		require.False(t, seen[j.RunAt], "tick %s fired twice", j.RunAt)
		seen[j.RunAt] = true
		require.False(t, j.CreatedAt.Before(j.RunAt), "job created %s before its tick", j.RunAt.Sub(j.CreatedAt))
	}
	require.GreaterOrEqual(t, len(seen), want)
	t.Logf("3 hosts on PostgreSQL: %d ticks, %d jobs", len(seen), len(jobs))
}
