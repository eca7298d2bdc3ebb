package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestDeadlockRetry: Migrate's transaction runs again after PostgreSQL
// aborted it to break a deadlock, and only then.
func TestDeadlockRetry(t *testing.T) {
	deadlock := fmt.Errorf("pgstore: migrate: apply 0003_scale.sql: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"})
	other := &pgconn.PgError{Code: "42P01", Message: "undefined table"}
	cases := []struct {
		name      string
		errs      []error // fn's results, in order; nil after the last
		attempts  int
		wantCalls int
		want      error
	}{
		{name: "success", errs: nil, attempts: 5, wantCalls: 1, want: nil},
		{name: "deadlock then success", errs: []error{deadlock, deadlock}, attempts: 5, wantCalls: 3, want: nil},
		{name: "deadlocks up to the bound", errs: []error{deadlock, deadlock, deadlock}, attempts: 3, wantCalls: 3, want: deadlock},
		{name: "other errors are not retried", errs: []error{other}, attempts: 5, wantCalls: 1, want: other},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := deadlockRetry(context.Background(), c.attempts, 0, func() error {
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
}
