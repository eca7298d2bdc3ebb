package citustest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRetryDeadlocks checks the retry of a setup or cleanup statement: a
// deadlock is tried again until it passes or deadlockTries are spent,
// any other error or none ends it at once.
func TestRetryDeadlocks(t *testing.T) {
	deadlock := &pgconn.PgError{Code: "40P01", Message: "canceling the transaction since it was involved in a distributed deadlock"}
	other := &pgconn.PgError{Code: "42P01", Message: "relation does not exist"}
	cases := []struct {
		name      string
		errs      []error // fn's results in turn; nil after the last
		wantCalls int
		want      error
	}{
		{"passes at once", nil, 1, nil},
		{"two deadlocks, then passes", []error{deadlock, fmt.Errorf("reset: %w", deadlock)}, 3, nil},
		{"another error ends it", []error{other, nil}, 1, other},
		{"a deadlock, then another error", []error{deadlock, other}, 2, other},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := RetryDeadlocks(func() error {
				calls++
				if calls <= len(c.errs) {
					return c.errs[calls-1]
				}
				return nil
			})
			if calls != c.wantCalls || !errors.Is(err, c.want) {
				t.Errorf("calls %d, err %v; want %d, %v", calls, err, c.wantCalls, c.want)
			}
		})
	}
	t.Run("gives up", func(t *testing.T) {
		calls := 0
		err := RetryDeadlocks(func() error { calls++; return deadlock })
		if calls != deadlockTries || !errors.Is(err, deadlock) {
			t.Errorf("calls %d, err %v; want %d and the deadlock", calls, err, deadlockTries)
		}
	})
}
