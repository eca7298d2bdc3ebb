// Package axtest helps test code that uses AX: a Scheduler on a fresh
// in-memory store with a clock the test moves, jobs run inline and in a
// fixed order instead of by background workers, assertions on what was
// scheduled, and a fresh PostgreSQL schema per test for code that
// schedules inside its own transactions (ScheduleTx).
//
//	func TestSignup(t *testing.T) {
//		s, clock := axtest.NewScheduler(t, ax.Config{})
//		ax.Handle(s, "email.welcome", sendWelcome)
//		signup(t.Context(), s, "ada@example.com") // your code: schedules email.welcome in 10 minutes
//		axtest.RequireScheduled(t, s, "email.welcome", axtest.Payload(Welcome{To: "ada@example.com"}))
//		clock.Advance(10 * time.Minute)
//		axtest.Work(t, s) // runs it, here and now
//	}
//
// Nothing runs in the background: a Scheduler from NewScheduler is never
// started, and Work runs due jobs on the test's goroutine, one at a time,
// in claim order (priority, then run time).
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
// is silent. The Scheduler is not started (use Work to run jobs) and is
// stopped when the test ends.
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

// Work runs every job due now on s, inline (see ax.Scheduler.RunDue), and
// returns how many attempts ran. It fails the test on a store error.
func Work(t testing.TB, s *ax.Scheduler) int {
	t.Helper()
	n, err := s.RunDue(context.Background())
	if err != nil {
		t.Fatalf("axtest: work: %v", err)
	}
	return n
}

// RunOne runs the one job due first on s, inline, and reports whether
// there was one. It fails the test on a store error.
func RunOne(t testing.TB, s *ax.Scheduler) bool {
	t.Helper()
	ran, err := s.RunNextDue(context.Background())
	if err != nil {
		t.Fatalf("axtest: run one: %v", err)
	}
	return ran
}
