package ax_test

import (
	"context"
	"fmt"
	"testing"

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
