package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// bulkCheck checks one job after a Bulk call: before is the job as read
// before it, got as read after (nil when the job is gone), [from, to]
// brackets the store clock around the call.
type bulkCheck func(t *testing.T, before, got *store.JobRecord, from, to time.Time)

// bulkUnchanged requires that Bulk left the job alone.
func bulkUnchanged(t *testing.T, before, got *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.NotNil(t, got, "job deleted")
	requireSameRecord(t, before, got, "job changed")
}

// bulkDueNow requires a scheduled job due at the call, its attempt number
// kept (a final job's next attempt is numbered on) and one more attempt
// allowed.
func bulkDueNow(t *testing.T, before, got *store.JobRecord, from, to time.Time) {
	t.Helper()
	require.NotNil(t, got, "job deleted")
	require.Equal(t, store.StateScheduled, got.State)
	requireBetween(t, from, to, got.RunAt, "run_at")
	require.Equal(t, before.Attempt, got.Attempt, "attempt")
	require.Greater(t, got.MaxAttempts, got.Attempt, "no attempt left")
	require.True(t, got.FinishedAt.IsZero(), "FinishedAt cleared")
	require.Equal(t, len(before.Errors), len(got.Errors), "errors kept")
}

// bulkCancelled requires a job cancelled by the call.
func bulkCancelled(t *testing.T, _, got *store.JobRecord, from, to time.Time) {
	t.Helper()
	require.NotNil(t, got, "job deleted")
	require.Equal(t, store.StateCancelled, got.State)
	requireBetween(t, from, to, got.FinishedAt, "FinishedAt")
}

// bulkCancelRequested requires a running job asked to stop.
func bulkCancelRequested(t *testing.T, before, got *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.NotNil(t, got, "job deleted")
	require.Equal(t, store.StateRunning, got.State)
	require.True(t, got.CancelRequested, "cancel not requested")
	require.Equal(t, before.LeaseToken, got.LeaseToken, "lease changed")
}

// bulkDeleted requires the job gone.
func bulkDeleted(t *testing.T, _, got *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.Nil(t, got, "job not deleted")
}

// bulkSubject makes one job for a Bulk case.
type bulkSubject struct {
	name string
	make func(t *testing.T, st store.Store, kind string) *store.JobRecord
}

// bulkSubjects are a job in every state, and the special cases Bulk
// must leave alone or treat apart. The cancelled job whose key was taken
// shares its kind with the taker (unique keys are per kind by default),
// so Bulk calls select the subjects by ID as well as by kind.
var bulkSubjects = func() []bulkSubject {
	var out []bulkSubject
	for _, s := range store.States {
		out = append(out, bulkSubject{string(s), func(t *testing.T, st store.Store, kind string) *store.JobRecord {
			return makeJob(t, st, s, kind)
		}})
	}
	return append(out,
		bulkSubject{"running-cancel-requested", func(t *testing.T, st store.Store, kind string) *store.JobRecord {
			j := makeJob(t, st, store.StateRunning, kind)
			return control(t, st, j.ID, store.OpCancel)
		}},
		bulkSubject{"cancelled-key-taken", func(t *testing.T, st store.Store, kind string) *store.JobRecord {
			j := makeJob(t, st, store.StateCancelled, kind, withUniqueKey("bulk-key-"+kind))
			insertOne(t, st, kind, notDue, withUniqueKey("bulk-key-"+kind))
			return get(t, st, j.ID)
		}},
		// A dead job gives its key up in the default scope; a job taking
		// it meanwhile keeps run-now from reopening the dead one.
		bulkSubject{"dead-key-taken", func(t *testing.T, st store.Store, kind string) *store.JobRecord {
			j := makeJob(t, st, store.StateDead, kind, withUniqueKey("bulk-dead-key-"+kind))
			insertOne(t, st, kind, notDue, withUniqueKey("bulk-dead-key-"+kind))
			return get(t, st, j.ID)
		}},
		// Last: the makers of running jobs claim every due job of the kind.
		bulkSubject{"scheduled-due", func(t *testing.T, st store.Store, kind string) *store.JobRecord {
			return get(t, st, insertOne(t, st, kind, withRunAt(storeNow(t, st).Add(-time.Minute))))
		}},
	)
}()

// testBulk checks the optional BulkController: what each operation does
// to a job in each state, that only matching jobs change, Limit, oldest
// first, draining by repeated calls, notifications and refused params.
func testBulk(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.BulkController](t, newStore)
	cases := []struct {
		op     store.BulkOp
		checks map[string]bulkCheck // by subject; missing: unchanged
	}{
		{store.BulkRunNow, map[string]bulkCheck{
			"scheduled": bulkDueNow,
			"retrying":  bulkDueNow,
			"paused":    bulkDueNow,
			"dead":      bulkDueNow,
			"cancelled": bulkDueNow,
		}},
		{store.BulkCancel, map[string]bulkCheck{
			"scheduled":     bulkCancelled,
			"retrying":      bulkCancelled,
			"paused":        bulkCancelled,
			"running":       bulkCancelRequested,
			"scheduled-due": bulkCancelled,
		}},
		{store.BulkDelete, map[string]bulkCheck{
			"succeeded":           bulkDeleted,
			"dead":                bulkDeleted,
			"cancelled":           bulkDeleted,
			"cancelled-key-taken": bulkDeleted,
			"dead-key-taken":      bulkDeleted,
		}},
	}
	for _, c := range cases {
		t.Run(c.op.String(), func(t *testing.T) {
			st := newStore(t)
			b := as[store.BulkController](t, st)
			kind := "bulk." + c.op.String()
			before := make(map[string]*store.JobRecord)
			f := store.JobFilter{Kinds: []string{kind}}
			for _, s := range bulkSubjects {
				before[s.name] = s.make(t, st, kind)
				f.IDs = append(f.IDs, before[s.name].ID)
			}
			// Jobs of another kind, in every state, stay as they are.
			var others []*store.JobRecord
			for _, s := range store.States {
				others = append(others, makeJob(t, st, s, "bulk.untouched"))
			}

			from := storeNow(t, st)
			n, err := b.Bulk(t.Context(), &store.BulkParams{Op: c.op, Filter: f, Limit: 100})
			to := storeNow(t, st)
			require.NoError(t, err)
			require.Equal(t, len(c.checks), n, "jobs changed")
			for _, s := range bulkSubjects {
				t.Run(s.name, func(t *testing.T) {
					got, err := st.Get(t.Context(), before[s.name].ID)
					if err != nil {
						require.ErrorIs(t, err, store.ErrNotFound)
						got = nil
					}
					check, ok := c.checks[s.name]
					if !ok {
						check = bulkUnchanged
					}
					check(t, before[s.name], got, from, to)
				})
			}
			for _, j := range others {
				requireUnchanged(t, st, j)
			}

			// Nothing is left to change: a second call changes nothing.
			n, err = b.Bulk(t.Context(), &store.BulkParams{Op: c.op, Filter: f, Limit: 100})
			require.NoError(t, err)
			require.Zero(t, n, "a second call changed jobs")
		})
	}

	// Limit: each call changes at most Limit jobs, oldest first, and
	// repeated calls with the same filter (on the kind alone: changed jobs
	// still match it) drain the selection.
	drains := []struct {
		op    store.BulkOp
		state store.State
		after store.State // state of a changed job; "" when deleted
	}{
		{store.BulkRunNow, store.StateDead, store.StateScheduled},
		{store.BulkRunNow, store.StatePaused, store.StateScheduled},
		{store.BulkCancel, store.StateScheduled, store.StateCancelled},
		{store.BulkDelete, store.StateSucceeded, ""},
	}
	for _, d := range drains {
		t.Run("Limit/"+d.op.String()+"/"+string(d.state), func(t *testing.T) {
			st := newStore(t)
			b := as[store.BulkController](t, st)
			var ids []uuid.UUID
			for range 5 {
				ids = append(ids, makeJob(t, st, d.state, "bulk.limit").ID)
			}
			f := store.JobFilter{Kinds: []string{"bulk.limit"}}
			for call, want := range []int{2, 2, 1, 0} {
				n, err := b.Bulk(t.Context(), &store.BulkParams{Op: d.op, Filter: f, Limit: 2})
				require.NoError(t, err)
				require.Equal(t, want, n, "call %d", call)
				// The oldest jobs went first.
				done := min(2*(call+1), len(ids))
				for i, id := range ids {
					j, err := st.Get(t.Context(), id)
					switch {
					case i < done && d.after == "":
						require.ErrorIs(t, err, store.ErrNotFound, "job %d after call %d", i, call)
					case i < done:
						require.NoError(t, err)
						require.Equal(t, d.after, j.State, "job %d after call %d", i, call)
					default:
						require.NoError(t, err)
						require.Equal(t, d.state, j.State, "job %d after call %d", i, call)
					}
				}
			}
		})
	}

	t.Run("RunNowNotifies", func(t *testing.T) {
		st := newStore(t)
		b := as[store.BulkController](t, st)
		n := as[store.Notifier](t, st)
		j := makeJob(t, st, store.StateDead, "bulk.notify")
		rec := newRecorder()
		t.Cleanup(n.Subscribe(rec.record))
		changed, err := b.Bulk(t.Context(), &store.BulkParams{Op: store.BulkRunNow, Filter: store.JobFilter{IDs: []uuid.UUID{j.ID}}, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, 1, changed)
		rec.waitFor(t, "for the job made due", notifiesRunAt("bulk.notify", get(t, st, j.ID).RunAt))
	})

	t.Run("Invalid", func(t *testing.T) {
		st := newStore(t)
		b := as[store.BulkController](t, st)
		j := makeJob(t, st, store.StateDead, "bulk.invalid")
		bad := []struct {
			name   string
			params store.BulkParams
		}{
			{"NoOp", store.BulkParams{Limit: 1}},
			{"UnknownOp", store.BulkParams{Op: store.BulkDelete + 1, Limit: 1}},
			{"LimitZero", store.BulkParams{Op: store.BulkDelete}},
			{"LimitTooLarge", store.BulkParams{Op: store.BulkDelete, Limit: store.MaxBulkLimit + 1}},
			{"UnknownState", store.BulkParams{Op: store.BulkDelete, Limit: 1, Filter: store.JobFilter{States: []store.State{"finished"}}}},
			{"UnknownPriority", store.BulkParams{Op: store.BulkRunNow, Limit: 1, Filter: store.JobFilter{Priorities: []int{9}}}},
			{"InvalidText", store.BulkParams{Op: store.BulkRunNow, Limit: 1, Filter: store.JobFilter{UniqueKeyPrefix: invalidUTF8}}},
		}
		for _, c := range bad {
			t.Run(c.name, func(t *testing.T) {
				n, err := b.Bulk(t.Context(), &c.params)
				require.ErrorIs(t, err, store.ErrInvalidParams)
				require.Zero(t, n)
				requireUnchanged(t, st, j)
			})
		}
	})
}
