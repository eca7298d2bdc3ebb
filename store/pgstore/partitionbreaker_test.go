package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

// partitionEvents hands the partition breakers' events to a channel.
type partitionEvents chan ax.Event

func (c partitionEvents) Observe(e ax.Event) {
	if e.Partitioned {
		c <- e
	}
}

// TestPartitionBreakerHealthyPartitionsGoOnPG is issue 40's scenario on
// PostgreSQL, with two hosts (two Stores on one database): webhooks
// partitioned by subscriber, one subscriber down. Its third failure in a
// row opens its partition's breaker (one event, naming it); then 100
// jobs of ten healthy subscribers all start and succeed, while the down
// one's cool-down (an hour) holds only its own jobs: it ran at most the
// attempts that were already running when its breaker opened. Before
// partition breakers, the kind's breaker (the only one) stopped every
// subscriber: 0 of 20 healthy deliveries started in 32 s.
func TestPartitionBreakerHealthyPartitionsGoOnPG(t *testing.T) {
	const (
		kind     = "webhook"
		failures = 3
		workers  = 4
		healthy  = 10
		each     = 10
	)
	pool, first := newPoolStore(t)
	second, err := pgstore.New(ctxT(t), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Close() })

	var (
		mu       sync.Mutex
		attempts = map[string]int{}
	)
	done := make(chan string, healthy*each)
	events := make(partitionEvents, 10)
	hosts := make([]*ax.Scheduler, 2)
	for i, st := range []*pgstore.Store{first, second} {
		s, err := ax.New(ax.Config{Store: st, Node: fmt.Sprint("host-", i), Workers: workers, MaxAttempts: 1000,
			PollInterval: time.Hour, Observers: []ax.Observer{events}, Logger: zap.NewNop()})
		require.NoError(t, err)
		require.NoError(t, s.Handle(kind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			sub := j.Metadata["sub"]
			mu.Lock()
			attempts[sub]++
			mu.Unlock()
			if sub == "down" {
				return errors.New("subscriber down")
			}
			done <- sub
			return nil
		}), ax.PartitionBreaker(ax.PartitionByMetadata("sub"), ax.BreakerConfig{Failures: failures, CoolDown: time.Hour}),
			ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return 0 }))))
		require.NoError(t, s.Start(ctxT(t)))
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		hosts[i] = s
	}
	schedule := func(s *ax.Scheduler, sub string, n int) {
		reqs := make([]ax.Request, n)
		for i := range reqs {
			reqs[i] = ax.Request{Kind: kind, Options: []ax.ScheduleOption{ax.Metadata(map[string]string{"sub": sub})}}
		}
		_, err := s.ScheduleMany(ctxT(t), reqs)
		require.NoError(t, err)
	}

	schedule(hosts[0], "down", 20)
	var opened ax.Event
	select {
	case opened = <-events:
	case <-ctxT(t).Done():
		t.Fatal("the down partition's breaker did not open")
	}
	require.Equal(t, ax.EventBreakerOpened, opened.Kind)
	require.Equal(t, "down", opened.PartitionKey)

	for i := range healthy {
		schedule(hosts[i%2], fmt.Sprint("sub-", i), each)
	}
	for n := range healthy * each {
		select {
		case <-done:
		case <-ctxT(t).Done():
			t.Fatalf("%d of %d healthy jobs succeeded", n, healthy*each)
		}
	}
	for _, s := range hosts {
		require.NoError(t, s.Stop(ctxT(t))) // the handlers' counts are final
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range healthy {
		require.Equal(t, each, attempts[fmt.Sprint("sub-", i)])
	}
	require.GreaterOrEqual(t, attempts["down"], failures)
	require.LessOrEqual(t, attempts["down"], failures+len(hosts)*workers-1,
		"the open partition ran only the attempts already running when it opened")
	list, err := hosts[0].Admin().PartitionBreakers(ctxT(t), kind)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "down", list[0].PartitionKey)
	require.Equal(t, ax.BreakerOpen, list[0].Breaker.State)
	select {
	case e := <-events:
		t.Fatalf("one transition only, got also %+v", e)
	default:
	}
}
