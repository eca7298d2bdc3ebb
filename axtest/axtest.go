// Package axtest helps test code that uses AX: a Scheduler on a fresh
// in-memory store with a clock the test moves, jobs and periodic ticks run
// inline and in a fixed order instead of by background workers, typed
// assertions on what was scheduled, and, for code that schedules inside
// its own transactions (ScheduleTx), a PostgreSQL store and pool on fresh
// schemas of the test's own.
//
//	type WelcomeArgs struct{ To string }
//
//	func (WelcomeArgs) Kind() string { return "email.welcome" }
//
//	func TestSignup(t *testing.T) {
//		s, clock := axtest.NewScheduler(t, ax.Config{})
//		ax.HandleArgs(s, sendWelcome)
//		signup(t.Context(), s, "ada@example.com") // your code: enqueues a WelcomeArgs in 10 minutes
//		j := axtest.RequireScheduled[WelcomeArgs](t, s, axtest.RunAt(axtest.Epoch.Add(10*time.Minute)))
//		// j.Args.To == "ada@example.com"; j.State, j.RunAt... are the job record's
//		clock.Advance(10 * time.Minute)
//		axtest.Work(t, s) // runs it, here and now
//	}
//
// # Running jobs
//
// Nothing runs in the background: a Scheduler from NewScheduler is never
// started, and Work runs due jobs on the test's goroutine, one at a time,
// in claim order (priority, then run time); RunOne runs one.
//
// # Assertions
//
// RequireScheduled[A], RequireNotScheduled[A] and RequireManyScheduled
// (with ExpectArgs[A]) assert on the jobs of a JobArgs type's kind,
// waiting to run unless a State match says otherwise, and
// RequireScheduled returns the job with its payload decoded into an A.
// RequireScheduledKind and RequireNotScheduledKind (with Expect{Kind: ...})
// do the same for kinds named by a string, whose payloads are not
// JobArgs. Failures list the jobs there are.
//
// # Periodic schedules
//
// Schedules given to Every on a Scheduler from NewScheduler fire on the
// test's clock, without polling: each Work (or RunOne) first fires the
// ticks due at the clock's time, as a host waking then would, and runs
// their jobs. A schedule counts its ticks from its Every call; the ticks
// a single Work finds follow the schedule's MisfirePolicy (by default one
// job, for the latest), so a test that wants each tick's job moves the
// clock one tick at a time:
//
//	s.Every("digest", "@hourly", DigestArgs{}) // jobs of kind "digest", DigestArgs{}.Kind()
//	clock.Advance(time.Hour)
//	axtest.Work(t, s) // the 10:00 tick's job runs
//	axtest.RequireScheduled[DigestArgs](t, s, axtest.State(ax.StateSucceeded))
//
// A started Scheduler (ax.Scheduler.Start) fires ticks in the background,
// on the host's timers; Start returns once its schedules are recorded in
// the store, so their ticks count from then.
//
// # PostgreSQL
//
// Postgres and NewPostgresScheduler give each test a pgstore on a schema
// of its own and a pool whose search_path is a second schema of its own,
// where the tables the test creates land; both are dropped when the test
// ends, so tests of code that keeps its rows and its jobs in one
// transaction run in parallel on one database.
//
// # SQLite
//
// For code that schedules in its *sql.Tx on the SQLite store,
// github.com/axsched/ax/store/sqlitestore/sqlitetest.NewScheduler returns
// a Scheduler on a fresh file of the test's own, its database and a
// Clock; Work and the assertions here apply to it. It lives in the
// sqlitestore module, so that importing axtest does not pull SQLite in.
package axtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// Epoch is where every Clock starts: a fixed instant, so tests that print
// times are reproducible.
var Epoch = time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)

// Clock is a clock that moves only when told to. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at Epoch.
func NewClock() *Clock { return &Clock{now: Epoch} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d moves it back, as a
// host clock stepped back by NTP would).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// NewScheduler returns a Scheduler for a test, on a fresh memstore whose
// clock, and the Scheduler's, is the returned Clock. cfg's zero fields take
// their defaults; its Store and Clock are replaced, and without a Logger it
// is silent. The Scheduler is not started (Work fires its periodic ticks
// and runs its jobs) and is stopped when the test ends.
func NewScheduler(t testing.TB, cfg ax.Config) (*ax.Scheduler, *Clock) {
	t.Helper()
	clock := NewClock()
	cfg.Store = memstore.New(memstore.WithClock(clock.Now))
	cfg.Clock = clock.Now
	return newScheduler(t, cfg), clock
}

// newScheduler creates the Scheduler of cfg and stops it at the end of t.
func newScheduler(t testing.TB, cfg ax.Config) *ax.Scheduler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = nopLogger
	}
	s, err := ax.New(cfg)
	if err != nil {
		t.Fatalf("axtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// Work fires the periodic ticks due now on s and runs every job due now,
// inline (see ax.Scheduler.RunDue), and returns how many attempts ran. It
// fails the test on a store error.
func Work(t testing.TB, s *ax.Scheduler) int {
	t.Helper()
	n, err := s.RunDue(context.Background())
	if err != nil {
		t.Fatalf("axtest: work: %v", err)
	}
	return n
}

// RunOne fires the periodic ticks due now on s and runs the one job due
// first, inline (see ax.Scheduler.RunNextDue), and reports whether there
// was one. It fails the test on a store error.
func RunOne(t testing.TB, s *ax.Scheduler) bool {
	t.Helper()
	ran, err := s.RunNextDue(context.Background())
	if err != nil {
		t.Fatalf("axtest: run one: %v", err)
	}
	return ran
}
