package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// template returns a periodic job template of kind, with every field a
// store records set, and the fields it must drop (ID, RunAt, Delay,
// UniqueKey) set too.
func template(t *testing.T, kind string, priority int) *store.InsertParams {
	return &store.InsertParams{
		ID:          newID(t),
		Kind:        kind,
		Payload:     json.RawMessage(`{"report": "daily",  "n": 1}`),
		Metadata:    map[string]string{"team": "ops"},
		Priority:    priority,
		MaxAttempts: 4,
		RunAt:       time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		Delay:       time.Minute,
		UniqueKey:   "dropped",
	}
}

// requireTemplate requires that got is tmpl as a store records it.
func requireTemplate(t *testing.T, tmpl, got *store.InsertParams) {
	t.Helper()
	require.NotNil(t, got, "template not recorded")
	want := *tmpl
	want.ID, want.RunAt, want.Delay, want.UniqueKey = uuid.Nil, time.Time{}, 0, ""
	require.Equal(t, string(want.Payload), string(got.Payload), "payload byte for byte")
	rest := *got
	want.Payload, rest.Payload = nil, nil
	require.Equal(t, want, rest)
}

// testPeriodicController checks the optional PeriodicController with the
// PeriodicStore: listing with templates, template updates, pause and
// resume, paused schedules' ticks passing without jobs, and refused or
// unknown names.
func testPeriodicController(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.PeriodicController](t, newStore)
	t.Run("ListAndTemplates", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		pc := as[store.PeriodicController](t, st)
		list, err := pc.ListPeriodic(t.Context())
		require.NoError(t, err)
		require.Empty(t, list)

		tb, ta := template(t, "pc.b", store.PriorityLow), template(t, "pc.a", store.PriorityHigh)
		for _, d := range []store.DeclarePeriodicParams{
			{Name: "pc.b", Spec: "@every 1h", Job: tb},
			{Name: "pc.a", Spec: "0 6 * * *", Job: ta},
			{Name: "pc.none", Spec: "@daily"},
		} {
			got, err := ps.DeclarePeriodic(t.Context(), &d)
			require.NoError(t, err)
			if d.Job != nil {
				requireTemplate(t, d.Job, got.State.Job)
			} else {
				require.Nil(t, got.State.Job)
			}
		}
		list, err = pc.ListPeriodic(t.Context())
		require.NoError(t, err)
		require.Len(t, list, 3)
		require.Equal(t, []string{"pc.a", "pc.b", "pc.none"}, []string{list[0].Name, list[1].Name, list[2].Name}, "ordered by name")
		require.Equal(t, "0 6 * * *", list[0].Spec)
		requireTemplate(t, ta, list[0].Job)
		requireTemplate(t, tb, list[1].Job)
		require.Nil(t, list[2].Job)
		for _, s := range list {
			require.False(t, s.Paused, s.Name)
		}

		// A declaration without a template keeps the recorded one; one
		// with a template replaces it.
		_, err = ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "pc.a", Spec: "0 6 * * *"})
		require.NoError(t, err)
		got, err := ps.PeriodicState(t.Context(), "pc.a")
		require.NoError(t, err)
		requireTemplate(t, ta, got.Job)
		ta2 := template(t, "pc.a2", store.PriorityNormal)
		_, err = ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "pc.a", Spec: "0 7 * * *", Job: ta2})
		require.NoError(t, err)
		got, err = ps.PeriodicState(t.Context(), "pc.a")
		require.NoError(t, err)
		requireTemplate(t, ta2, got.Job)
		require.Equal(t, "0 7 * * *", got.Spec)

		// An invalid template is refused and records nothing.
		bad := template(t, "pc.bad", store.PriorityNormal)
		bad.MaxAttempts = 0
		_, err = ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "pc.bad", Spec: "@daily", Job: bad})
		require.ErrorIs(t, err, store.ErrInvalidParams)
		_, err = ps.PeriodicState(t.Context(), "pc.bad")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("PauseFiresNoJobs", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PeriodicStore](t, st)
		pc := as[store.PeriodicController](t, st)
		base := storeNow(t, st).Truncate(time.Second).Add(-time.Hour)
		res, err := ps.FirePeriodic(t.Context(), fireParams(t, "pc.pause", base))
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.Applied)

		before := storeNow(t, st)
		paused, err := pc.SetPeriodicPaused(t.Context(), "pc.pause", true)
		require.NoError(t, err)
		require.True(t, paused.Paused)
		requireBetween(t, before, storeNow(t, st), paused.UpdatedAt, "UpdatedAt of the pause")
		requireTimeNear(t, base, paused.LastTick, storedTolerance, "a pause keeps LastTick")
		again, err := pc.SetPeriodicPaused(t.Context(), "pc.pause", true)
		require.NoError(t, err)
		requireTimeNear(t, paused.UpdatedAt, again.UpdatedAt, 0, "pausing a paused schedule changed it")

		// A declaration keeps the pause.
		d, err := ps.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "pc.pause", Spec: "spec of pc.pause"})
		require.NoError(t, err)
		require.True(t, d.State.Paused, "a declaration resumed the schedule")

		// Ticks pass without jobs while paused.
		p := fireParams(t, "pc.pause", base.Add(time.Minute), base.Add(2*time.Minute))
		res, err = ps.FirePeriodic(t.Context(), p)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, res.Applied)
		requireTimeNear(t, base.Add(2*time.Minute), res.LastTick, storedTolerance)
		for i, tk := range p.Ticks {
			require.Equal(t, store.InsertResult{}, res.Jobs[i], "tick %d of a paused schedule", i)
			requireNotFound(t, st, tk.Job.ID)
		}

		// After a resume, the next tick fires with its job; the ticks that
		// passed while paused do not come back.
		resumed, err := pc.SetPeriodicPaused(t.Context(), "pc.pause", false)
		require.NoError(t, err)
		require.False(t, resumed.Paused)
		list, err := pc.ListPeriodic(t.Context())
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.False(t, list[0].Paused)
		p = fireParams(t, "pc.pause", base.Add(time.Minute), base.Add(3*time.Minute))
		res, err = ps.FirePeriodic(t.Context(), p)
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, res.Applied)
		require.Equal(t, store.InsertResult{ID: p.Ticks[1].Job.ID}, res.Jobs[1])
		get(t, st, p.Ticks[1].Job.ID)
		requireNotFound(t, st, p.Ticks[0].Job.ID)
	})

	t.Run("UnknownAndInvalid", func(t *testing.T) {
		st := newStore(t)
		pc := as[store.PeriodicController](t, st)
		for _, paused := range []bool{true, false} {
			_, err := pc.SetPeriodicPaused(t.Context(), "pc.unknown", paused)
			require.ErrorIs(t, err, store.ErrNotFound)
			for _, name := range []string{"", invalidUTF8, "a\x00b"} {
				_, err := pc.SetPeriodicPaused(t.Context(), name, paused)
				require.ErrorIs(t, err, store.ErrInvalidParams, "name %q", name)
			}
		}
		list, err := pc.ListPeriodic(t.Context())
		require.NoError(t, err)
		require.Empty(t, list, "a refused call created a schedule")
	})
}
