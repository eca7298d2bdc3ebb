package ax_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// noDelay retries at once, for tests.
var noDelay = ax.RetryPolicyFunc(func(int, error) time.Duration { return 0 })

// newScheduler returns a Scheduler on st with small test intervals, stopped
// at the end of the test.
func newScheduler(t *testing.T, st store.Store, edit ...func(*ax.Config)) *ax.Scheduler {
	t.Helper()
	cfg := ax.Config{Store: st, PollInterval: 50 * time.Millisecond}
	for _, e := range edit {
		e(&cfg)
	}
	s, err := ax.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

func start(t *testing.T, s *ax.Scheduler) {
	t.Helper()
	require.NoError(t, s.Start(context.Background()))
}

// waitState polls the store until the job reaches want, failing after a
// generous deadline. It waits on a condition, not on a guess of time.
func waitState(t *testing.T, st store.Store, id uuid.UUID, want store.State) *store.JobRecord {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := st.Get(context.Background(), id)
		require.NoError(t, err)
		if rec.State == want {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: state %s, want %s (record %+v)", id, rec.State, want, rec)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// recv waits for a value from ch or fails the test.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for an event")
		panic("unreachable")
	}
}

// fakeClock is a settable clock for a memstore.
type fakeClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func newMemstore(opts ...memstore.Option) *memstore.Store { return memstore.New(opts...) }

// scheduleN schedules n jobs of kind in one call.
func scheduleN(t *testing.T, s *ax.Scheduler, kind string, n int) {
	t.Helper()
	reqs := make([]ax.Request, n)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: kind}
	}
	_, err := s.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
}

// eventCounter is an Observer counting events of some kinds; a test waits
// on it for a count, so observers listed before it have seen those events.
type eventCounter struct {
	kinds map[ax.EventKind]bool
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
}

func newEventCounter(kinds ...ax.EventKind) *eventCounter {
	c := &eventCounter{kinds: make(map[ax.EventKind]bool)}
	for _, k := range kinds {
		c.kinds[k] = true
	}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *eventCounter) Observe(e ax.Event) {
	if !c.kinds[e.Kind] {
		return
	}
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	c.cond.Broadcast()
}

// waitFor waits until n events were counted, failing the test after a
// generous deadline.
func (c *eventCounter) waitFor(t *testing.T, n int) {
	t.Helper()
	timeout := time.AfterFunc(30*time.Second, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n = -1 << 30 // wake the waiter and fail it
		c.cond.Broadcast()
	})
	defer timeout.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n >= 0 && c.n < n {
		c.cond.Wait()
	}
	if c.n < 0 {
		t.Fatalf("timed out waiting for %d events", n)
	}
}

// slowCall is a loaded store's answer: it waits d, or until ctx ends,
// whose error it returns.
func slowCall(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
