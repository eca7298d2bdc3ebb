package ax_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// pendingOf returns the pending (scheduled and retrying) jobs of kind.
func pendingOf(t *testing.T, st *memstore.Store, kind string) int64 {
	t.Helper()
	counts, err := st.CountJobs(context.Background())
	require.NoError(t, err)
	var n int64
	for _, c := range counts {
		if c.Kind == kind && c.State.Claimable() {
			n += c.Count
		}
	}
	return n
}

// TestBackpressureRacingProducers: a kind with MaxPending(1000), handled
// by a host that is not running, and ten producers scheduling as fast as
// they can from processes that do not handle it: the pending count never
// passes 1,000 (memstore applies each insert alone; racing PostgreSQL
// producers overshoot by one each at most), and every refusal is a
// *BackpressureError that tells the kind, depth and limit.
func TestBackpressureRacingProducers(t *testing.T) {
	st := memstore.New()
	consumer := newScheduler(t, st, quiet)
	require.NoError(t, consumer.Handle("q", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }), ax.MaxPending(1000)))
	start(t, consumer)
	require.NoError(t, consumer.Stop(t.Context())) // declared; now nobody runs the jobs
	events := newFlowEvents()
	var (
		wg       sync.WaitGroup
		refusals atomic.Int64
		peak     atomic.Int64
	)
	for range 10 {
		producer := newScheduler(t, st, quiet, func(c *ax.Config) { c.Observers = []ax.Observer{events} })
		wg.Go(func() {
			for refusals.Load() < 50 {
				_, err := producer.Schedule(context.Background(), "q", nil)
				var bp *ax.BackpressureError
				switch {
				case errors.As(err, &bp):
					if !errors.Is(err, ax.ErrBackpressure) || bp.Kind != "q" || bp.Limit != 1000 || bp.Depth != 1000 {
						t.Errorf("refusal %v: %+v", err, bp)
					}
					refusals.Add(1)
				case err != nil:
					t.Errorf("schedule: %v", err)
					return
				}
				peak.Store(max(peak.Load(), pendingOf(t, st, "q")))
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(1000), pendingOf(t, st, "q"))
	require.LessOrEqual(t, peak.Load(), int64(1000+10))
	// Events are delivered by each producer's event goroutine, started
	// with Start: these producers never start, so none is delivered yet.
}

// TestBackpressureAllKinds: Config.MaxPending bounds the pending jobs of
// every kind together, for the Scheduler that has it.
func TestBackpressureAllKinds(t *testing.T) {
	st := memstore.New()
	bounded := newScheduler(t, st, quiet, func(c *ax.Config) { c.MaxPending = 3 })
	free := newScheduler(t, st, quiet)
	for _, kind := range []string{"a", "b", "c"} {
		_, err := bounded.Schedule(t.Context(), kind, nil)
		require.NoError(t, err)
	}
	_, err := bounded.Schedule(t.Context(), "d", nil)
	var bp *ax.BackpressureError
	require.ErrorAs(t, err, &bp)
	require.Equal(t, ax.BackpressureError{Kind: "", Depth: 3, Limit: 3}, *bp)
	require.Contains(t, err.Error(), "all kinds")
	_, err = free.Schedule(t.Context(), "d", nil)
	require.NoError(t, err, "another Scheduler without the bound")
	_, err = bounded.ScheduleMany(t.Context(), []ax.Request{{Kind: "a"}, {Kind: "b"}, {Kind: "c"}, {Kind: "d"}})
	require.ErrorIs(t, err, ax.ErrBackpressure)
}

// TestWaitForCapacity: a Schedule with WaitForCapacity waits while the
// kind is full and returns once a claim made room; its context ending
// first returns an error matching both ErrBackpressure and the context's
// error; a call that could never fit returns at once.
func TestWaitForCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		events := newFlowEvents()
		s := newScheduler(t, st, quiet, func(c *ax.Config) { c.Observers = []ax.Observer{events} })
		release := make(chan struct{})
		require.NoError(t, s.Handle("q", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			<-release
			return nil
		}), ax.MaxPending(2), ax.Concurrency(1)))
		start(t, s)
		ctx := t.Context()
		scheduleN(t, s, "q", 1) // runs, and holds the only worker slot
		time.Sleep(10 * time.Millisecond)
		scheduleN(t, s, "q", 2) // pending: the kind is full
		synctest.Wait()

		done := make(chan error, 1)
		begin := time.Now()
		go func() {
			_, err := s.Schedule(ctx, "q", nil, ax.WaitForCapacity(ctx))
			done <- err
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Empty(t, done, "Schedule returned while the kind was full")
		release <- struct{}{} // the running job ends; the next one is claimed
		require.NoError(t, <-done)
		t.Logf("waited %s", time.Since(begin))

		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := s.Schedule(ctx, "q", nil, ax.WaitForCapacity(short))
		require.ErrorIs(t, err, ax.ErrBackpressure)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		_, err = s.ScheduleMany(ctx, []ax.Request{{Kind: "q"}, {Kind: "q"}, {Kind: "q", Options: []ax.ScheduleOption{ax.WaitForCapacity(ctx)}}})
		require.ErrorIs(t, err, ax.ErrBackpressure, "three jobs never fit a MaxPending of 2")
		close(release)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		bp := events.of(ax.EventBackpressure)
		require.Len(t, bp, 3, "one event per call that met the bound")
		require.Equal(t, "q", bp[0].JobKind)
		require.ErrorIs(t, bp[0].Err, ax.ErrBackpressure)
	})
}

// TestPartitionKeyFromProducerThatDoesNotHandle: partitions are applied by
// the store for producers that know nothing of the kind.
func TestPartitionKeyFromProducerThatDoesNotHandle(t *testing.T) {
	st := memstore.New()
	consumer := newScheduler(t, st, quiet)
	require.NoError(t, consumer.Handle("p", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
		ax.PartitionBy(ax.PartitionByPayloadField("customer"), ax.PartitionLimit{Concurrency: 1})))
	start(t, consumer)
	require.NoError(t, consumer.Stop(t.Context()))
	producer := newScheduler(t, st, quiet)
	res, err := producer.Schedule(t.Context(), "p", map[string]any{"customer": 42})
	require.NoError(t, err)
	j, err := producer.Get(t.Context(), res.ID)
	require.NoError(t, err)
	require.Equal(t, "42", j.PartitionKey)
}
