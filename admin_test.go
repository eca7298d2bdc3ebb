package ax_test

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// newAdmin returns a standalone Admin on st, as a CLI would make it.
func newAdmin(t *testing.T, st store.Store) *ax.Admin {
	t.Helper()
	a, err := ax.NewAdmin(ax.AdminConfig{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	return a
}

// bareStore hides every optional interface of the store it wraps.
type bareStore struct{ store.Store }

// fillStore schedules, through a Scheduler that never starts, n jobs of
// each kind, in order, and returns their IDs by kind.
func fillStore(t *testing.T, st store.Store, n int, kinds ...string) map[string][]uuid.UUID {
	t.Helper()
	s := newScheduler(t, st)
	ids := make(map[string][]uuid.UUID)
	for range n {
		for _, k := range kinds {
			res, err := s.Schedule(t.Context(), k, map[string]string{"kind": k}, ax.In(time.Hour))
			require.NoError(t, err)
			ids[k] = append(ids[k], res.ID)
		}
	}
	return ids
}

func jobIDs(jobs []*ax.JobRecord) []uuid.UUID {
	out := make([]uuid.UUID, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestNewAdmin(t *testing.T) {
	_, err := ax.NewAdmin(ax.AdminConfig{})
	require.ErrorIs(t, err, ax.ErrInvalidConfig)
	a, err := ax.NewAdmin(ax.AdminConfig{Store: memstore.New()})
	require.NoError(t, err)
	require.NotNil(t, a)
}

// TestAdminList pages through filtered listings in both orders and
// refuses bad options, filters and cursors.
func TestAdminList(t *testing.T) {
	st := newMemstore()
	a := newAdmin(t, st)
	ids := fillStore(t, st, 5, "list.a", "list.b")
	want := ids["list.a"]
	reversed := slices.Clone(want)
	slices.Reverse(reversed)

	for _, c := range []struct {
		name  string
		order ax.ListOrder
		want  []uuid.UUID
	}{
		{"NewestFirstByDefault", 0, reversed},
		{"OldestFirst", ax.OldestFirst, want},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []uuid.UUID
			cursor := ""
			for page := 0; ; page++ {
				l, err := a.List(t.Context(), ax.ListOptions{Filter: ax.JobFilter{Kinds: []string{"list.a"}}, Order: c.order, Cursor: cursor, Limit: 2})
				require.NoError(t, err)
				got = append(got, jobIDs(l.Jobs)...)
				if l.Cursor == "" {
					require.Equal(t, 2, page, "pages of 2, 2 and 1")
					break
				}
				cursor = l.Cursor
			}
			require.Equal(t, c.want, got)
		})
	}

	t.Run("DefaultLimit", func(t *testing.T) {
		l, err := a.List(t.Context(), ax.ListOptions{})
		require.NoError(t, err)
		require.Len(t, l.Jobs, 10)
		require.Empty(t, l.Cursor)
	})
	t.Run("EmptyIsNotNull", func(t *testing.T) {
		l, err := a.List(t.Context(), ax.ListOptions{Filter: ax.JobFilter{Kinds: []string{"none"}}})
		require.NoError(t, err)
		require.NotNil(t, l.Jobs)
		require.Empty(t, l.Jobs)
	})

	first, err := a.List(t.Context(), ax.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, first.Cursor)
	raw, err := base64.RawURLEncoding.DecodeString(first.Cursor)
	require.NoError(t, err)
	bad := []struct {
		name string
		opts ax.ListOptions
		err  error
	}{
		{"Garbage", ax.ListOptions{Cursor: "not a cursor!"}, ax.ErrInvalidCursor},
		{"Truncated", ax.ListOptions{Cursor: first.Cursor[:10]}, ax.ErrInvalidCursor},
		{"OtherOrder", ax.ListOptions{Cursor: first.Cursor, Order: ax.OldestFirst}, ax.ErrInvalidCursor},
		{"OtherVersion", ax.ListOptions{Cursor: base64.RawURLEncoding.EncodeToString(append([]byte{0x70}, raw[1:]...))}, ax.ErrInvalidCursor},
		{"NilID", ax.ListOptions{Cursor: base64.RawURLEncoding.EncodeToString(append(raw[:1:1], make([]byte, 16)...))}, ax.ErrInvalidCursor},
		{"LimitNegative", ax.ListOptions{Limit: -1}, ax.ErrInvalidOption},
		{"LimitTooLarge", ax.ListOptions{Limit: store.MaxListLimit + 1}, ax.ErrInvalidOption},
		{"UnknownOrder", ax.ListOptions{Order: 3}, ax.ErrInvalidOption},
		{"UnknownState", ax.ListOptions{Filter: ax.JobFilter{States: []ax.State{"done"}}}, ax.ErrInvalidFilter},
		{"UnknownPriority", ax.ListOptions{Filter: ax.JobFilter{Priorities: []int{0}}}, ax.ErrInvalidFilter},
		{"InvalidText", ax.ListOptions{Filter: ax.JobFilter{Kinds: []string{"a\xff"}}}, ax.ErrInvalidFilter},
		{"TimeOutOfRange", ax.ListOptions{Filter: ax.JobFilter{RunAfter: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)}}, ax.ErrInvalidFilter},
	}
	for _, c := range bad {
		t.Run("Refuses/"+c.name, func(t *testing.T) {
			_, err := a.List(t.Context(), c.opts)
			require.ErrorIs(t, err, c.err)
		})
	}
	_, err = a.Count(t.Context(), ax.JobFilter{States: []ax.State{"done"}})
	require.ErrorIs(t, err, ax.ErrInvalidFilter)
	require.Contains(t, err.Error(), `unknown state "done"`)
	n, err := a.Count(t.Context(), ax.JobFilter{Kinds: []string{"list.b"}})
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
}

// TestAdminUnsupported checks that every method needing an optional
// store interface says so with errors.ErrUnsupported.
func TestAdminUnsupported(t *testing.T) {
	a := newAdmin(t, bareStore{newMemstore()})
	ctx := t.Context()
	calls := map[string]func() error{
		"List":            func() error { _, err := a.List(ctx, ax.ListOptions{}); return err },
		"Count":           func() error { _, err := a.Count(ctx, ax.JobFilter{}); return err },
		"RetryJobs":       func() error { _, err := a.RetryJobs(ctx, ax.JobFilter{}); return err },
		"CancelJobs":      func() error { _, err := a.CancelJobs(ctx, ax.JobFilter{}); return err },
		"DeleteJobs":      func() error { _, err := a.DeleteJobs(ctx, ax.JobFilter{}, ax.MatchAll()); return err },
		"PauseKind":       func() error { _, err := a.PauseKind(ctx, "k"); return err },
		"ResumeKind":      func() error { _, err := a.ResumeKind(ctx, "k"); return err },
		"Kinds":           func() error { _, err := a.Kinds(ctx); return err },
		"Schedules":       func() error { _, err := a.Schedules(ctx); return err },
		"PauseSchedule":   func() error { _, err := a.PauseSchedule(ctx, "s"); return err },
		"TriggerSchedule": func() error { _, err := a.TriggerSchedule(ctx, "s"); return err },
		"Nodes":           func() error { _, err := a.Nodes(ctx); return err },
		"Leader":          func() error { _, err := a.Leader(ctx); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, call(), errors.ErrUnsupported)
		})
	}
}

// TestAdminBulk retries, cancels and deletes by filter in small batches
// and checks the counts, the states and that only the selection changed.
func TestAdminBulk(t *testing.T) {
	st := newMemstore()
	a := newAdmin(t, st)
	ctx := t.Context()
	s := newScheduler(t, st)
	require.NoError(t, s.Handle("bulk.flaky", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return errors.New("downstream down")
	})))
	var ids []uuid.UUID
	for range 7 {
		res, err := s.Schedule(ctx, "bulk.flaky", nil, ax.MaxAttempts(1))
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	other, err := s.Schedule(ctx, "bulk.other", nil, ax.In(time.Hour))
	require.NoError(t, err)
	start(t, s)
	for _, id := range ids {
		waitState(t, st, id, ax.StateDead)
	}
	dead := ax.JobFilter{States: []ax.State{ax.StateDead}, ErrorContains: "downstream"}
	n, err := a.Count(ctx, dead)
	require.NoError(t, err)
	require.Equal(t, int64(7), n)

	// The downstream is back: retry every dead job, three per batch.
	require.NoError(t, s.Stop(ctx))
	s3 := newScheduler(t, st)
	require.NoError(t, s3.Handle("bulk.flaky", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	changed, err := a.RetryJobs(ctx, dead, ax.BatchSize(3))
	require.NoError(t, err)
	require.Equal(t, 7, changed)
	again, err := a.RetryJobs(ctx, dead, ax.BatchSize(3))
	require.NoError(t, err)
	require.Zero(t, again, "nothing left to retry")
	start(t, s3)
	for _, id := range ids {
		rec := waitState(t, st, id, ax.StateSucceeded)
		require.Equal(t, 2, rec.Attempt, "the retry's attempt follows the dead one's")
		require.Len(t, rec.Errors, 1, "the failure is kept")
	}

	// Delete refuses to match everything unless told.
	_, err = a.DeleteJobs(ctx, ax.JobFilter{})
	require.ErrorIs(t, err, ax.ErrFilterMatchesAll)
	n, err = a.Count(ctx, ax.JobFilter{})
	require.NoError(t, err)
	require.Equal(t, int64(8), n, "nothing deleted")
	_, err = a.DeleteJobs(ctx, ax.JobFilter{States: []ax.State{"gone"}})
	require.ErrorIs(t, err, ax.ErrInvalidFilter)
	_, err = a.DeleteJobs(ctx, ax.JobFilter{}, ax.BatchSize(0))
	require.ErrorIs(t, err, ax.ErrInvalidOption)

	deleted, err := a.DeleteJobs(ctx, ax.JobFilter{}, ax.MatchAll(), ax.BatchSize(2))
	require.NoError(t, err)
	require.Equal(t, 7, deleted, "the succeeded jobs")
	cancelled, err := a.CancelJobs(ctx, ax.JobFilter{Kinds: []string{"bulk.other"}})
	require.NoError(t, err)
	require.Equal(t, 1, cancelled)
	rec, err := a.Get(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, ax.StateCancelled, rec.State)
	_, err = a.Get(ctx, ids[0])
	require.ErrorIs(t, err, ax.ErrNotFound)
}
