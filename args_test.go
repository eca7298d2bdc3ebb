package ax_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// Kind implements ax.JobArgs: EmailArgs (example_test.go) names its kind.
func (EmailArgs) Kind() string { return "email.send" }

// ptrArgs has a pointer receiver that dereferences: its zero value cannot
// tell the kind.
type ptrArgs struct{ kind string }

func (p *ptrArgs) Kind() string { return p.kind }

func TestHandleArgsAndEnqueue(t *testing.T) {
	st := memstore.New()
	s := newScheduler(t, st)
	got := make(chan EmailArgs, 2)
	require.NoError(t, ax.HandleArgs(s, func(_ context.Context, j *ax.Job, a EmailArgs) error {
		require.Equal(t, "email.send", j.Kind)
		got <- a
		return nil
	}))
	require.ErrorIs(t, ax.HandleArgs(s, func(context.Context, *ax.Job, EmailArgs) error { return nil }), ax.ErrDuplicateHandler)
	require.ErrorIs(t, ax.HandleArgs(s, func(context.Context, *ax.Job, *ptrArgs) error { return nil }), ax.ErrInvalidKind)
	start(t, s)
	_, err := ax.Enqueue(t.Context(), s, EmailArgs{To: "ada@example.com"})
	require.NoError(t, err)
	_, err = ax.EnqueueMany(t.Context(), s, []EmailArgs{{To: "grace@example.com"}})
	require.NoError(t, err)
	seen := map[string]bool{recv(t, got).To: true, recv(t, got).To: true}
	require.Equal(t, map[string]bool{"ada@example.com": true, "grace@example.com": true}, seen)
}

// ExampleHandleArgs registers a handler by its payload type and schedules
// a job without naming its kind.
func ExampleHandleArgs() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = ax.HandleArgs(s, func(_ context.Context, j *ax.Job, a EmailArgs) error {
		fmt.Printf("%s to %s\n", j.Kind, a.To)
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	if _, err := ax.Enqueue(ctx, s, EmailArgs{To: "ada@example.com"}); err != nil {
		panic(err)
	}
	<-done
	// Output: email.send to ada@example.com
}

// chargeArgs states its jobs' options: five attempts, high priority, a
// unique key from its order and some metadata.
type chargeArgs struct {
	Order string `json:"order"`
}

func (chargeArgs) Kind() string { return "order.charge" }

func (a chargeArgs) ScheduleOptions() []ax.ScheduleOption {
	return []ax.ScheduleOption{ax.MaxAttempts(5), ax.Priority(ax.High), ax.UniqueKey("charge:" + a.Order),
		ax.Metadata(map[string]string{"from": "type"})}
}

// optsArgs states the options it carries, whatever they are.
type optsArgs struct{ opts []ax.ScheduleOption }

func (optsArgs) Kind() string                           { return "opts" }
func (a optsArgs) ScheduleOptions() []ax.ScheduleOption { return a.opts }

// nilOptsArgs is used as a nil pointer: its ScheduleOptions panics.
type nilOptsArgs struct{ opts []ax.ScheduleOption }

func (*nilOptsArgs) Kind() string                           { return "nil.opts" }
func (a *nilOptsArgs) ScheduleOptions() []ax.ScheduleOption { return a.opts }

// TestArgsOptions: every call that schedules a JobArgs applies the type's
// own options (JobArgsWithOptions) over the kind's handler options, and
// the options given at the call over the type's; metadata adds up.
func TestArgsOptions(t *testing.T) {
	type want struct {
		maxAttempts int
		priority    ax.PriorityLevel
		uniqueKey   string
		metadata    map[string]string
	}
	variants := []struct {
		name string
		opts func(order string) []ax.ScheduleOption
		want func(order string) want
	}{
		{
			name: "type's options",
			opts: func(string) []ax.ScheduleOption { return nil },
			want: func(order string) want {
				return want{5, ax.High, "charge:" + order, map[string]string{"from": "type"}}
			},
		},
		{
			name: "call's options win",
			opts: func(order string) []ax.ScheduleOption {
				return []ax.ScheduleOption{ax.MaxAttempts(2), ax.Priority(ax.Low), ax.UniqueKey("call:" + order),
					ax.Metadata(map[string]string{"from": "call", "call": "yes"})}
			},
			want: func(order string) want {
				return want{2, ax.Low, "call:" + order, map[string]string{"from": "call", "call": "yes"}}
			},
		},
		{
			name: "call sets some",
			opts: func(string) []ax.ScheduleOption {
				return []ax.ScheduleOption{ax.MaxAttempts(9), ax.Metadata(map[string]string{"call": "yes"})}
			},
			want: func(order string) want {
				return want{9, ax.High, "charge:" + order, map[string]string{"from": "type", "call": "yes"}}
			},
		},
	}
	// Each schedules one job of a (in a handler's Then, or as a
	// follow-up, for some) and returns once it is stored. Then and
	// follow-up jobs keep no unique key (store.FollowUp).
	keeps := func(key string) string { return key }
	drops := func(string) string { return "" }
	apis := []struct {
		name     string
		schedule func(t *testing.T, s *ax.Scheduler, a chargeArgs, opts []ax.ScheduleOption)
		key      func(string) string
	}{
		{"Enqueue", func(t *testing.T, s *ax.Scheduler, a chargeArgs, opts []ax.ScheduleOption) {
			_, err := ax.Enqueue(t.Context(), s, a, opts...)
			require.NoError(t, err)
		}, keeps},
		{"EnqueueMany", func(t *testing.T, s *ax.Scheduler, a chargeArgs, opts []ax.ScheduleOption) {
			_, err := ax.EnqueueMany(t.Context(), s, []chargeArgs{a}, opts...)
			require.NoError(t, err)
		}, keeps},
		{"ScheduleMany of NewRequest", func(t *testing.T, s *ax.Scheduler, a chargeArgs, opts []ax.ScheduleOption) {
			_, err := s.ScheduleMany(t.Context(), []ax.Request{ax.NewRequest(a, opts...), ax.NewRequest(EmailArgs{To: "x"})})
			require.NoError(t, err)
		}, keeps},
		{"batch child", func(t *testing.T, s *ax.Scheduler, a chargeArgs, opts []ax.ScheduleOption) {
			_, err := s.ScheduleBatch(t.Context(), ax.Batch{
				Children:   []ax.Request{ax.NewRequest(a, opts...)},
				Completion: ax.NewRequest(EmailArgs{To: "done"}),
			})
			require.NoError(t, err)
		}, keeps},
		{"ThenArgs", func(t *testing.T, s *ax.Scheduler, a chargeArgs, opts []ax.ScheduleOption) {
			thenOpts.Store(&opts)
			res, err := ax.Enqueue(t.Context(), s, parentArgs{Then: &a})
			require.NoError(t, err)
			waitState(t, s.Store(), res.ID, ax.StateSucceeded)
		}, drops},
		{"FollowUpArgs", func(t *testing.T, s *ax.Scheduler, a chargeArgs, opts []ax.ScheduleOption) {
			res, err := ax.Enqueue(t.Context(), s, parentArgs{}, ax.FollowUpArgs([]ax.State{ax.StateSucceeded}, a, opts...))
			require.NoError(t, err)
			waitState(t, s.Store(), res.ID, ax.StateSucceeded)
		}, drops},
	}
	for _, api := range apis {
		for _, v := range variants {
			t.Run(api.name+"/"+v.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := argsHost(t)
					order := api.name + "/" + v.name
					w := v.want(order)
					api.schedule(t, s, chargeArgs{Order: order}, append(v.opts(order), ax.In(time.Hour)))
					list, err := s.Admin().List(t.Context(), ax.ListOptions{Filter: ax.JobFilter{Kinds: []string{"order.charge"}}})
					require.NoError(t, err)
					require.Len(t, list.Jobs, 1)
					rec := list.Jobs[0]
					require.Equal(t, api.key(w.uniqueKey), rec.UniqueKey)
					require.Equal(t, w.maxAttempts, rec.MaxAttempts)
					require.Equal(t, int(w.priority), rec.Priority)
					require.Equal(t, w.metadata, rec.Metadata)
					require.JSONEq(t, `{"order":"`+order+`"}`, string(rec.Payload))
				})
			})
		}
	}
}

// argsHost returns a started Scheduler on a memstore that handles
// chargeArgs, with handler options the type's beat (its jobs wait, kept
// for inspection), and parentArgs, whose handler adds a Then job.
func argsHost(t *testing.T) *ax.Scheduler {
	s := newScheduler(t, memstore.New())
	require.NoError(t, ax.HandleArgs(s, func(context.Context, *ax.Job, chargeArgs) error { return nil },
		ax.MaxAttempts(3), ax.Priority(ax.Normal)))
	require.NoError(t, ax.HandleArgs(s, func(ctx context.Context, _ *ax.Job, p parentArgs) error {
		if p.Then == nil {
			return nil
		}
		return ax.ThenArgs(ctx, *p.Then, *thenOpts.Load()...)
	}))
	start(t, s)
	return s
}

// parentArgs is a job whose handler adds a Then job of its Then, with the
// options in thenOpts.
type parentArgs struct {
	Then *chargeArgs `json:"then,omitempty"`
}

func (parentArgs) Kind() string { return "parent" }

var thenOpts atomic.Pointer[[]ax.ScheduleOption]

// TestArgsRefused: what the typed calls refuse, with the error they say,
// nothing stored.
func TestArgsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st)
		ctx := t.Context()
		panicky := (*nilOptsArgs)(nil)
		nilKind := (*ptrArgs)(nil)
		badOpts := optsArgs{opts: []ax.ScheduleOption{ax.MaxAttempts(0)}}
		nilOpt := optsArgs{opts: []ax.ScheduleOption{nil}}
		var nilArgs ax.JobArgs
		batch := func(r ax.Request) error {
			_, err := s.ScheduleBatch(ctx, ax.Batch{Children: []ax.Request{r}, Completion: ax.NewRequest(EmailArgs{})})
			return err
		}
		many := func(r ax.Request) error {
			_, err := s.ScheduleMany(ctx, []ax.Request{ax.NewRequest(EmailArgs{}), r})
			return err
		}
		for _, tc := range []struct {
			name string
			call func() error
			want error
		}{
			{"Enqueue of a nil pointer", func() error { _, err := ax.Enqueue(ctx, s, nilKind); return err }, ax.ErrInvalidKind},
			{"Enqueue of a nil JobArgs", func() error { _, err := ax.Enqueue(ctx, s, nilArgs); return err }, ax.ErrInvalidKind},
			{"Enqueue, ScheduleOptions panics", func() error { _, err := ax.Enqueue(ctx, s, panicky); return err }, ax.ErrInvalidOption},
			{"Enqueue, invalid type option", func() error { _, err := ax.Enqueue(ctx, s, badOpts); return err }, ax.ErrInvalidOption},
			{"Enqueue, nil type option", func() error { _, err := ax.Enqueue(ctx, s, nilOpt); return err }, ax.ErrInvalidOption},
			{"EnqueueMany, one bad", func() error {
				_, err := ax.EnqueueMany(ctx, s, []ax.JobArgs{EmailArgs{}, nilKind})
				return err
			}, ax.ErrInvalidKind},
			{"NewRequest of a nil pointer", func() error { return many(ax.NewRequest(nilKind)) }, ax.ErrInvalidKind},
			{"NewRequest, ScheduleOptions panics", func() error { return many(ax.NewRequest(panicky)) }, ax.ErrInvalidOption},
			{"batch child of a nil JobArgs", func() error { return batch(ax.NewRequest(nilArgs)) }, ax.ErrInvalidKind},
			{"batch child, invalid type option", func() error { return batch(ax.NewRequest(badOpts)) }, ax.ErrInvalidOption},
			{"FollowUpArgs of a nil pointer", func() error {
				_, err := ax.Enqueue(ctx, s, EmailArgs{}, ax.FollowUpArgs([]ax.State{ax.StateDead}, nilKind))
				return err
			}, ax.ErrInvalidKind},
			{"FollowUpArgs, not a final state", func() error {
				_, err := ax.Enqueue(ctx, s, EmailArgs{}, ax.FollowUpArgs([]ax.State{ax.StateRunning}, chargeArgs{}))
				return err
			}, ax.ErrInvalidOption},
			{"ThenArgs outside a handler", func() error { return ax.ThenArgs(ctx, chargeArgs{}) }, ax.ErrNotInHandler},
			{"ThenArgs of a nil pointer", func() error { return ax.ThenArgs(ctx, nilKind) }, ax.ErrInvalidKind},
			{"EnqueueTx on memstore, pgx.Tx", func() error {
				_, err := ax.EnqueueTx(ctx, s, pgx.Tx(nil), chargeArgs{})
				return err
			}, ax.ErrTxUnsupported},
			{"EnqueueTx on memstore, *sql.Tx", func() error {
				_, err := ax.EnqueueTx(ctx, s, (*sql.Tx)(nil), chargeArgs{})
				return err
			}, ax.ErrTxUnsupported},
			{"EnqueueManyTx on memstore", func() error {
				_, err := ax.EnqueueManyTx(ctx, s, (*sql.Tx)(nil), []chargeArgs{{}})
				return err
			}, ax.ErrTxUnsupported},
			{"ScheduleManyTx on memstore", func() error {
				_, err := s.ScheduleManyTx(ctx, nil, []ax.Request{ax.NewRequest(chargeArgs{})})
				return err
			}, ax.ErrTxUnsupported},
			{"ScheduleManyTxOf on memstore", func() error {
				_, err := ax.ScheduleManyTxOf(ctx, s, (*sql.Tx)(nil), []ax.Request{ax.NewRequest(chargeArgs{})})
				return err
			}, ax.ErrTxUnsupported},
		} {
			require.ErrorIs(t, tc.call(), tc.want, tc.name)
		}
		n, err := s.Admin().Count(ctx, ax.JobFilter{})
		require.NoError(t, err)
		require.Zero(t, n, "nothing stored")
	})
}
