package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// TestDefect8InputPostgresCannotStore sends PostgreSQL what it cannot
// store — invalid UTF-8 and NUL bytes in kinds, keys, metadata, payloads
// and error texts, times past its range, a MaxAttempts past 32 bits — and
// checks that each is refused with a matchable error before it reaches
// the database, that nothing is stored, and that the host goes on running
// every other job. (Before: Handle("odd\xffkind") made every claim of every
// kind fail, and the rest leaked raw SQLSTATE errors.)
func TestDefect8InputPostgresCannotStore(t *testing.T) {
	st, pool := newPG(t)
	s := newScheduler(t, st)
	ctx := context.Background()

	require.ErrorIs(t, s.Handle("odd\xffkind", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })), ax.ErrInvalidKind)
	var ran atomic.Int64
	require.NoError(t, s.Handle("ok", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		ran.Add(1)
		if string(j.Payload) == `"fail"` {
			return errors.New("text PostgreSQL refuses: \x00 and \xff")
		}
		return nil
	}), ax.MaxAttempts(1)))
	require.NoError(t, s.Start(ctx))

	refused := []struct {
		name string
		kind string
		pay  any
		opts []ax.ScheduleOption
		want error
	}{
		{"kind NUL", "ok\x00", nil, nil, ax.ErrInvalidKind},
		{"unique key invalid UTF-8", "ok", nil, []ax.ScheduleOption{ax.UniqueKey("\xff")}, ax.ErrInvalidOption},
		{"metadata NUL", "ok", nil, []ax.ScheduleOption{ax.Metadata(map[string]string{"k": "a\x00b"})}, ax.ErrInvalidOption},
		{"metadata invalid UTF-8", "ok", nil, []ax.ScheduleOption{ax.Metadata(map[string]string{"k": "\xff"})}, ax.ErrInvalidOption},
		{"payload invalid UTF-8", "ok", json.RawMessage("\"\xff\""), nil, ax.ErrInvalidPayload},
		{"At year 300000", "ok", nil, []ax.ScheduleOption{ax.At(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC))}, ax.ErrInvalidOption},
		{"MaxAttempts past 32 bits", "ok", nil, []ax.ScheduleOption{ax.MaxAttempts(1 << 40)}, ax.ErrInvalidOption},
	}
	for _, r := range refused {
		_, err := s.Schedule(ctx, r.kind, r.pay, r.opts...)
		require.ErrorIs(t, err, r.want, r.name)
		_, err = s.ScheduleMany(ctx, []ax.Request{{Kind: "ok"}, {Kind: r.kind, Payload: r.pay, Options: r.opts}})
		require.ErrorIs(t, err, r.want, r.name+" (ScheduleMany)")
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all`).Scan(&n))
	require.Zero(t, n, "a refused input stored something")

	// The host still runs jobs, including one whose error text PostgreSQL
	// could not store as is.
	good, err := s.Schedule(ctx, "ok", "fine")
	require.NoError(t, err)
	bad, err := s.Schedule(ctx, "ok", "fail")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		g, err1 := s.Get(ctx, good.ID)
		b, err2 := s.Get(ctx, bad.ID)
		return err1 == nil && err2 == nil && g.State == ax.StateSucceeded && b.State == ax.StateDead
	}, 10*time.Second, 5*time.Millisecond)
	rec, err := s.Get(ctx, bad.ID)
	require.NoError(t, err)
	require.Len(t, rec.Errors, 1)
	require.True(t, strings.HasPrefix(rec.Errors[0].Error, "text PostgreSQL refuses: "), rec.Errors[0].Error)
	require.NoError(t, store.CheckText(rec.Errors[0].Error, store.MaxErrorLength))
}

// TestDefect11ScheduleTxCountsUncommittedJobs: ScheduleTx emits no
// EventScheduled, so metrics never count a job whose transaction rolled
// back; Schedule's committed jobs are counted. (Before: ScheduleTx emitted
// the event at insert, before the commit.)
func TestDefect11ScheduleTxCountsUncommittedJobs(t *testing.T) {
	st, pool := newPG(t)
	var scheduled atomic.Int64
	s := newScheduler(t, st, func(c *ax.Config) {
		c.Observers = []ax.Observer{ax.ObserverFunc(func(e ax.Event) {
			if e.Kind == ax.EventScheduled {
				scheduled.Add(1)
			}
		})}
	})
	ctx := context.Background()
	require.NoError(t, s.Start(ctx))
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = s.ScheduleTx(ctx, tx, "invoice", nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = s.Schedule(ctx, "invoice", nil)
	require.NoError(t, err)
	require.NoError(t, s.Stop(ctx)) // delivers the queued events
	require.Equal(t, int64(1), scheduled.Load(), "a rolled-back job was counted as scheduled")
}
