package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// How often Migrate runs its transaction when PostgreSQL aborts it to break
// a deadlock, and the pause before the first rerun (doubled each time).
// Found by internal/deploytest's rolling upgrade: main's migrations applied
// while hosts of v0.1.0 claimed and fired periodic ticks failed with
// "deadlock detected" in 0003_scale.
const (
	migrateAttempts     = 5
	migrateRetryBackoff = 100 * time.Millisecond
)

// isDeadlock reports whether err is PostgreSQL's deadlock_detected
// (40P01): the statement's transaction was rolled back to break a lock
// cycle, and running it again is safe.
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// deadlockRetry calls fn until it returns anything but a deadlock, at most
// attempts times, pausing backoff (doubled each time) between calls, and
// returns fn's last error. It stops early, returning that error, when ctx
// ends during a pause.
func deadlockRetry(ctx context.Context, attempts int, backoff time.Duration, fn func() error) error {
	for i := 1; ; i++ {
		err := fn()
		if err == nil || !isDeadlock(err) || i >= attempts {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff *= 2
	}
}
