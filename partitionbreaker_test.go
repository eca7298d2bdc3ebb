package ax_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// partitionTally counts, per partition, the attempts a handler started
// and when, and hands the successes to a channel the test waits on.
type partitionTally struct {
	mu       sync.Mutex
	attempts map[string]int
	last     map[string]time.Time // the last start of each partition
	done     chan string          // the partition of each success
}

func newPartitionTally() *partitionTally {
	return &partitionTally{attempts: map[string]int{}, last: map[string]time.Time{}, done: make(chan string, 10_000)}
}

// handler fails every attempt of partition "down" and succeeds the
// others after 10ms of work.
func (p *partitionTally) handler(_ context.Context, j *ax.Job) error {
	sub := j.Metadata["sub"]
	p.mu.Lock()
	p.attempts[sub]++
	p.last[sub] = time.Now()
	p.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	if sub == "down" {
		return errors.New("subscriber down")
	}
	p.done <- sub
	return nil
}

func (p *partitionTally) count(sub string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[sub]
}

func (p *partitionTally) lastStart(sub string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[sub]
}

// recvWithin waits up to d for a value from ch or fails the test.
func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("nothing received within %s", d)
		panic("unreachable")
	}
}

// breakerEvents hands the breaker events to a channel the test waits on.
type breakerEvents chan ax.Event

func (c breakerEvents) Observe(e ax.Event) {
	switch e.Kind {
	case ax.EventBreakerOpened, ax.EventBreakerHalfOpen, ax.EventBreakerClosed:
		c <- e
	}
}

// scheduleSub schedules n jobs of kind for partition sub.
func scheduleSub(t *testing.T, s *ax.Scheduler, kind, sub string, n int) {
	t.Helper()
	reqs := make([]ax.Request, n)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: kind, Options: []ax.ScheduleOption{ax.Metadata(map[string]string{"sub": sub})}}
	}
	_, err := s.ScheduleMany(t.Context(), reqs)
	require.NoError(t, err)
}

// TestPartitionBreakerIsolatesTheFailingPartition: two hosts deliver
// webhooks partitioned by subscriber; one subscriber is down. Its
// failures open its partition's breaker only (the event names it), after
// at most Failures attempts plus those already running; while it is open
// none of its jobs starts, and all 100 jobs of ten healthy subscribers,
// scheduled afterwards, start and succeed before its cool-down ends (with
// the kind's CircuitBreaker they would all wait for it). At the end of
// the cool-down the probe is one of the down subscriber's jobs, and its
// failure reopens that partition for twice as long. Admin lists the open
// partition, counts it in the kind's FlowState, and opens and closes a
// partition by hand, which holds back and then releases only its jobs.
func TestPartitionBreakerIsolatesTheFailingPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			kind     = "webhook"
			failures = 3
			coolDown = time.Minute
			workers  = 4
		)
		st := memstore.New()
		tally := newPartitionTally()
		events := make(breakerEvents, 100)
		hosts := make([]*ax.Scheduler, 2)
		for i := range hosts {
			hosts[i] = newScheduler(t, st, quiet, func(c *ax.Config) {
				c.Node = fmt.Sprint("host-", i)
				c.Workers = workers
				c.MaxAttempts = 1000
				c.Observers = []ax.Observer{events}
			})
			require.NoError(t, hosts[i].Handle(kind, ax.HandlerFunc(tally.handler),
				ax.PartitionBreaker(ax.PartitionByMetadata("sub"), ax.BreakerConfig{Failures: failures, CoolDown: coolDown}),
				ax.Retry(noDelay)))
			start(t, hosts[i])
		}
		ctx := t.Context()

		scheduleSub(t, hosts[0], kind, "down", 20)
		opened := recv(t, events)
		require.Equal(t, ax.EventBreakerOpened, opened.Kind)
		require.Equal(t, kind, opened.JobKind)
		require.True(t, opened.Partitioned)
		require.Equal(t, "down", opened.PartitionKey)
		require.Equal(t, coolDown, opened.Delay)
		openedAt := time.Now()
		synctest.Wait() // the attempts running at the opening end
		atOpen := tally.count("down")
		require.GreaterOrEqual(t, atOpen, failures)
		require.LessOrEqual(t, atOpen, failures+len(hosts)*workers-1, "at most the attempts already running when it opened")

		// Ten healthy subscribers' jobs all start and succeed within the
		// down subscriber's cool-down; none of its jobs starts meanwhile.
		const healthy, each = 10, 10
		for i := range healthy {
			scheduleSub(t, hosts[i%len(hosts)], kind, fmt.Sprint("sub-", i), each)
		}
		for range healthy * each {
			recv(t, tally.done)
		}
		for i := range healthy {
			sub := fmt.Sprint("sub-", i)
			require.Equal(t, each, tally.count(sub), "every job of %s ran once", sub)
			require.True(t, tally.lastStart(sub).Before(openedAt.Add(coolDown)), "%s waited for the down partition's cool-down", sub)
		}
		require.Equal(t, atOpen, tally.count("down"), "no job of the open partition started")

		list, err := hosts[1].Admin().PartitionBreakers(ctx, kind)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "down", list[0].PartitionKey)
		require.Equal(t, ax.BreakerOpen, list[0].Breaker.State)
		flows, err := hosts[1].Admin().Flows(ctx)
		require.NoError(t, err)
		require.Len(t, flows, 1)
		require.Equal(t, 1, flows[0].PartitionBreakersOpen)
		require.Equal(t, ax.BreakerClosed, flows[0].Breaker.State, "the kind itself is not stopped")

		// The cool-down ends: one probe, of the down partition, fails and
		// reopens it for twice as long.
		half := recvWithin(t, events, 2*coolDown)
		require.Equal(t, ax.EventBreakerHalfOpen, half.Kind)
		require.Equal(t, "down", half.PartitionKey)
		reopened := recv(t, events)
		require.Equal(t, ax.EventBreakerOpened, reopened.Kind)
		require.Equal(t, "down", reopened.PartitionKey)
		require.Equal(t, 2*coolDown, reopened.Delay)
		require.Equal(t, atOpen+1, tally.count("down"), "one probe")

		// By hand, from an Admin without a Scheduler: only the opened
		// partition waits; closing it starts its jobs at once.
		operator := newAdmin(t, st)
		pb, err := operator.OpenPartitionBreaker(ctx, kind, "sub-0")
		require.NoError(t, err)
		require.Equal(t, ax.BreakerOpen, pb.Breaker.State)
		scheduleSub(t, hosts[0], kind, "sub-0", 5)
		scheduleSub(t, hosts[0], kind, "sub-1", 5)
		for range 5 {
			require.Equal(t, "sub-1", recv(t, tally.done))
		}
		synctest.Wait()
		require.Equal(t, each, tally.count("sub-0"), "the partition opened by hand started nothing")
		pb, err = hosts[0].Admin().ClosePartitionBreaker(ctx, kind, "sub-0")
		require.NoError(t, err)
		require.Equal(t, ax.BreakerClosed, pb.Breaker.State)
		for range 5 {
			require.Equal(t, "sub-0", recv(t, tally.done))
		}
		closed := recv(t, events)
		require.Equal(t, ax.EventBreakerClosed, closed.Kind)
		require.Equal(t, "sub-0", closed.PartitionKey)
		require.Equal(t, "closed by hand", closed.Reason)
	})
}

// TestPartitionBreakerOption: the option's refusals, at Handle, each
// wrapping its sentinel and registering nothing.
func TestPartitionBreakerOption(t *testing.T) {
	byTenant := ax.PartitionByMetadata("tenant")
	ok := ax.BreakerConfig{Failures: 2}
	mem := memstore.New()
	// A FlowStore that keeps no partition breakers.
	flowOnly := struct {
		store.Store
		store.FlowStore
	}{mem, mem}
	tests := []struct {
		name string
		st   store.Store
		opts []ax.HandlerOption
		want error
	}{
		{"Ratio", mem, []ax.HandlerOption{ax.PartitionBreaker(byTenant, ax.BreakerConfig{FailureRatio: 0.5})}, ax.ErrInvalidOption},
		{"NoSource", mem, []ax.HandlerOption{ax.PartitionBreaker(ax.PartitionSource{}, ok)}, ax.ErrInvalidOption},
		{"Negative", mem, []ax.HandlerOption{ax.PartitionBreaker(byTenant, ax.BreakerConfig{Failures: -1})}, ax.ErrInvalidOption},
		{"OtherSource", mem, []ax.HandlerOption{
			ax.PartitionBy(ax.PartitionByPayloadField("tenant"), ax.PartitionLimit{Concurrency: 1}),
			ax.PartitionBreaker(byTenant, ok)}, ax.ErrInvalidOption},
		{"OtherSourceFirst", mem, []ax.HandlerOption{
			ax.PartitionBreaker(byTenant, ok),
			ax.PartitionBy(ax.PartitionByPayloadField("tenant"), ax.PartitionLimit{Concurrency: 1})}, ax.ErrInvalidOption},
		{"StoreWithout", flowOnly, []ax.HandlerOption{ax.PartitionBreaker(byTenant, ok)}, errors.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(t, tt.st, quiet)
			err := s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }), tt.opts...)
			require.ErrorIs(t, err, tt.want)
			require.Error(t, s.Handle("k", nil), "nothing registered: the kind is still free (nil handler refused)")
		})
	}
	t.Run("SameSource", func(t *testing.T) {
		s := newScheduler(t, mem, quiet)
		require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
			ax.PartitionBy(byTenant, ax.PartitionLimit{Concurrency: 2}), ax.PartitionBreaker(byTenant, ok)))
	})
	t.Run("AdminWithout", func(t *testing.T) {
		a := newAdmin(t, flowOnly)
		_, err := a.OpenPartitionBreaker(t.Context(), "k", "x")
		require.ErrorIs(t, err, errors.ErrUnsupported)
		_, err = a.PartitionBreakers(t.Context(), "k")
		require.ErrorIs(t, err, errors.ErrUnsupported)
		a = newAdmin(t, mem)
		_, err = a.OpenPartitionBreaker(t.Context(), "", "x")
		require.ErrorIs(t, err, ax.ErrInvalidKind)
		_, err = a.OpenPartitionBreaker(t.Context(), "k", "a\x00b")
		require.ErrorIs(t, err, ax.ErrInvalidOption)
		_, err = a.ClosePartitionBreaker(t.Context(), "k", "x")
		require.ErrorIs(t, err, ax.ErrNotFound)
	})
}
