// Package deadlockretry runs a statement again when PostgreSQL (or
// Citus) aborted it to break a deadlock: pgstore's migrations, and the
// Citus tests' setup and cleanup statements (internal/citustest), share
// this one loop. cmd/axbench keeps its own: its module builds against
// the released ax, which has no such package.
package deadlockretry

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Is reports whether err is PostgreSQL's deadlock_detected (40P01): the
// statement's transaction was rolled back to break a lock cycle, and
// running it again is safe.
func Is(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// Run calls fn until it returns anything but a deadlock, at most attempts
// times, pausing backoff (doubled each time) between calls, and returns
// fn's last error. It stops early, returning that error, when ctx ends
// during a pause.
func Run(ctx context.Context, attempts int, backoff time.Duration, fn func() error) error {
	for i := 1; ; i++ {
		err := fn()
		if err == nil || !Is(err) || i >= attempts {
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
