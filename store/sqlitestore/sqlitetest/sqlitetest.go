// Package sqlitetest is axtest for the SQLite store: a Scheduler on a
// fresh SQLite file of the test's own, whose database the test's own
// tables and transactions share, so that code which schedules and
// completes jobs inside its transactions (ax.ScheduleTxOf, ax.EnqueueTx,
// ax.ScheduleBatchTxOf, ax.CompleteTxOf with a *sql.Tx) is tested as it
// runs.
//
//	func TestSignup(t *testing.T) {
//		s, db, clock := sqlitetest.NewScheduler(t, ax.Config{})
//		ax.HandleArgs(s, sendWelcome)
//		_, _ = db.Exec(`CREATE TABLE users (email TEXT PRIMARY KEY)`)
//		signup(t.Context(), db, s, "ada@example.com") // your code: a user row and a WelcomeArgs, in one *sql.Tx
//		axtest.RequireScheduled[WelcomeArgs](t, s)
//		clock.Advance(10 * time.Minute)
//		axtest.Work(t, s) // runs it, here and now
//	}
//
// The Scheduler works as axtest.NewScheduler's does: it is never started,
// axtest.Work and axtest.RunOne run its jobs inline, and the returned
// axtest.Clock is its clock and the store's; axtest's assertions apply.
//
// It lives in the sqlitestore module, not in axtest: axtest is in the core
// module, which must not pull SQLite into the build of applications that
// do not use it (.ci/lean-check).
package sqlitetest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
	"github.com/axsched/ax/store/sqlitestore"
)

// Store returns, for a test, a sqlitestore.Store on a fresh file in
// t.TempDir(), opened with opts and closed when the test ends. Its DB is
// the database for the test's own tables and transactions.
func Store(t testing.TB, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ax.db")
	st, err := sqlitestore.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatalf("sqlitetest: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// NewScheduler returns a Scheduler for a test on a fresh SQLite file (see
// Store) whose clock, and the Scheduler's, is the returned Clock, and the
// file's database, on which the test's tables live and its transactions
// (*sql.Tx, from db.BeginTx) commit jobs with its rows. cfg's zero fields
// take their defaults; its Store and Clock are replaced, and without a
// Logger it is silent. The Scheduler is not started (axtest.Work runs its
// jobs) and is stopped when the test ends, before the file is closed.
//
// The database is the store's single writer connection: a transaction
// holds it until it commits or rolls back, so a test must end each
// transaction before it calls the Scheduler outside of it.
func NewScheduler(t testing.TB, cfg ax.Config) (*ax.Scheduler, *sql.DB, *axtest.Clock) {
	t.Helper()
	clock := axtest.NewClock()
	st := Store(t, sqlitestore.WithClock(clock.Now))
	cfg.Store = st
	cfg.Clock = clock.Now
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	s, err := ax.New(cfg)
	if err != nil {
		t.Fatalf("sqlitetest: %v", err)
	}
	t.Cleanup(func() { // runs before the store's Close (registered earlier)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s, st.DB(), clock
}
