package deadlockretry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRun: a statement aborted by a deadlock runs again, wrapped or not,
// until it passes or the attempts are spent; any other error, or none,
// ends it at once; a context that ends during a pause ends it with the
// deadlock.
func TestRun(t *testing.T) {
	deadlock := &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	wrapped := fmt.Errorf("pgstore: migrate: apply 0003_scale.sql: %w", deadlock)
	other := &pgconn.PgError{Code: "42P01", Message: "undefined table"}
	cases := []struct {
		name      string
		errs      []error // fn's results, in order; nil after the last
		attempts  int
		wantCalls int
		want      error
	}{
		{name: "success", errs: nil, attempts: 5, wantCalls: 1, want: nil},
		{name: "deadlocks then success", errs: []error{deadlock, wrapped}, attempts: 5, wantCalls: 3, want: nil},
		{name: "deadlocks up to the bound", errs: []error{deadlock, deadlock, wrapped}, attempts: 3, wantCalls: 3, want: deadlock},
		{name: "other errors are not retried", errs: []error{other, nil}, attempts: 5, wantCalls: 1, want: other},
		{name: "a deadlock, then another error", errs: []error{deadlock, other}, attempts: 5, wantCalls: 2, want: other},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := Run(context.Background(), c.attempts, 0, func() error {
				calls++
				if calls <= len(c.errs) {
					return c.errs[calls-1]
				}
				return nil
			})
			if calls != c.wantCalls || !errors.Is(err, c.want) {
				t.Fatalf("calls %d, error %v; want %d, %v", calls, err, c.wantCalls, c.want)
			}
		})
	}
	t.Run("context ends during a pause", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := 0
		err := Run(ctx, 5, time.Hour, func() error { calls++; return deadlock })
		if calls != 1 || !errors.Is(err, deadlock) {
			t.Fatalf("calls %d, error %v; want 1 and the deadlock", calls, err)
		}
	})
}
