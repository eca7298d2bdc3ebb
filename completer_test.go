package ax

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// finishLog records the Finish calls a FaultStore receives.
type finishLog struct {
	mu    sync.Mutex
	sizes []int
	at    []time.Time
}

func (l *finishLog) record(_ context.Context, params []store.FinishParams) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sizes = append(l.sizes, len(params))
	l.at = append(l.at, time.Now())
	return nil
}

func (l *finishLog) calls() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.sizes...)
}

// queueOutcomes moves attempts to queued and adds a succeeded outcome (or
// a failure with text errText[i], when given) for each.
func queueOutcomes(r *runtime, as []testAttempt, errText func(i int) string) {
	for i, a := range as {
		r.mu.Lock()
		a.state = attemptQueued
		r.mu.Unlock()
		p := store.FinishParams{Lease: a.lease, Outcome: store.OutcomeSucceeded}
		if errText != nil {
			if e := errText(i); e != "" {
				p.Outcome, p.Error = store.OutcomeDead, e
			}
		}
		r.completer.add(completion{params: p, attempt: a.attempt})
	}
}

// TestCompleterBatchesWithinFlushInterval: outcomes that arrive within
// FlushInterval of the first are written by one Finish call, at the end
// of the interval; the attempts then leave the registry.
func TestCompleterBatchesWithinFlushInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var log finishLog
		fs.SetBeforeFinish(log.record)
		r := testRuntime(t, fs, func(c *Config) { c.FlushInterval = 10 * time.Millisecond })
		as := claimAttempts(t, r, fs, "k", 50, time.Minute)
		go r.completer.run()
		begin := time.Now()
		queueOutcomes(r, as, nil)
		synctest.Wait()
		require.Empty(t, log.calls(), "written before the flush interval")
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, []int{50}, log.calls())
		require.Equal(t, 10*time.Millisecond, log.at[0].Sub(begin))
		for _, a := range as {
			require.False(t, registered(r, a.attempt))
			rec, err := fs.Get(t.Context(), a.lease.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateSucceeded, rec.State)
		}
		require.Zero(t, r.completer.stop(t.Context(), t.Context()))
	})
}

// TestCompleterSplitsRefusedBatch: a batch the store refuses
// (ErrInvalidParams) is split in halves until the refused row stands
// alone; every other outcome is written, the refused attempt leaves the
// registry (no longer extended), and stop counts it as not written.
func TestCompleterSplitsRefusedBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var log finishLog
		fs.SetBeforeFinish(func(ctx context.Context, params []store.FinishParams) error {
			_ = log.record(ctx, params)
			for _, p := range params {
				if strings.Contains(p.Error, "refused") {
					return fmt.Errorf("%w: row refused", store.ErrInvalidParams)
				}
			}
			return nil
		})
		r := testRuntime(t, fs)
		as := claimAttempts(t, r, fs, "k", 16, time.Minute)
		go r.completer.run()
		queueOutcomes(r, as, func(i int) string {
			if i == 5 {
				return "refused"
			}
			return ""
		})
		time.Sleep(time.Second)
		synctest.Wait()
		// Row 5 of 16: [0,16) refused → [0,8) refused → [0,4) written,
		// [4,8) refused → [4,6) refused → [4] written, [5] refused alone;
		// then [6,8) and [8,16) written.
		require.Equal(t, []int{16, 8, 4, 4, 2, 1, 1, 2, 8}, log.calls())
		for i, a := range as {
			rec, err := fs.Get(t.Context(), a.lease.ID)
			require.NoError(t, err)
			want := store.StateSucceeded
			if i == 5 {
				want = store.StateRunning // left for the rescuer
			}
			require.Equal(t, want, rec.State, "job %d", i)
			require.False(t, registered(r, a.attempt), "job %d still extended", i)
		}
		require.Equal(t, 1, r.completer.stop(t.Context(), t.Context()))
	})
}

// TestCompleterRetriesTransientFailures: a failing store (not a refusal)
// is retried with doubling backoff from 10ms, the batch kept whole, and
// the attempts stay registered (their leases extended) until it is
// written.
func TestCompleterRetriesTransientFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var (
			log   finishLog
			fails = 3
		)
		fs.SetBeforeFinish(func(ctx context.Context, params []store.FinishParams) error {
			_ = log.record(ctx, params)
			if fails > 0 {
				fails--
				return errors.New("connection reset")
			}
			return nil
		})
		r := testRuntime(t, fs)
		as := claimAttempts(t, r, fs, "k", 3, time.Minute)
		go r.completer.run()
		queueOutcomes(r, as, nil)
		time.Sleep(2 * time.Millisecond) // the flush interval
		synctest.Wait()
		require.True(t, registered(r, as[0].attempt), "an unwritten attempt left the registry")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []int{3, 3, 3, 3}, log.calls())
		gaps := []time.Duration{log.at[1].Sub(log.at[0]), log.at[2].Sub(log.at[1]), log.at[3].Sub(log.at[2])}
		require.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}, gaps)
		require.False(t, registered(r, as[0].attempt))
		require.Zero(t, r.completer.stop(t.Context(), t.Context()))
	})
}

// TestCompleterBoundedQueueAndStop: while the store hangs, the queue fills
// (its capacity, made 2 here) and add blocks, holding the worker; stop releases the
// blocked add at once (its outcome not written), gives the hung write until
// the grace deadline, and reports every outcome it could not write.
func TestCompleterBoundedQueueAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		fs.SetBeforeFinish(func(ctx context.Context, _ []store.FinishParams) error {
			<-ctx.Done()
			return ctx.Err()
		})
		r := testRuntime(t, fs, func(c *Config) { c.Workers = 2 })
		r.completer.capacity = 2
		as := claimAttempts(t, r, fs, "k", 5, time.Minute)
		go r.completer.run()
		queueOutcomes(r, as[:1], nil) // taken by the write that hangs
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		queueOutcomes(r, as[1:3], nil) // fill the queue
		added := make(chan bool)
		go func() {
			r.mu.Lock()
			as[3].state = attemptQueued
			r.mu.Unlock()
			added <- r.completer.add(completion{params: store.FinishParams{Lease: as[3].lease, Outcome: store.OutcomeSucceeded}, attempt: as[3].attempt})
		}()
		synctest.Wait()
		select {
		case <-added:
			t.Fatal("add did not wait for room in a full queue")
		default:
		}

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		grace, cancelGrace := graceContext(ctx, 50*time.Millisecond)
		defer cancelGrace()
		begin := time.Now()
		lost := r.completer.stop(ctx, grace)
		require.Equal(t, 150*time.Millisecond, time.Since(begin), "stop returned before or after the grace deadline")
		require.False(t, <-added, "a blocked add must give up at stop")
		require.Equal(t, 4, lost, "one hung write, two queued, one blocked add")
		require.False(t, r.completer.add(completion{params: store.FinishParams{Lease: as[4].lease, Outcome: store.OutcomeSucceeded}, attempt: as[4].attempt}))
		for _, a := range as {
			require.False(t, registered(r, a.attempt))
		}
	})
}

// TestCompleterWritesTwoBatchesAtOnce: while one Finish is in flight, the
// outcomes that arrive meanwhile go out in a second call beside it (a slow
// store no longer caps completion at one batch per round trip), and never
// more than flushConcurrency calls are in flight.
func TestCompleterWritesTwoBatchesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var (
			mu             sync.Mutex
			inFlight, peak int
			sizes          []int
			release        = make(chan struct{})
		)
		fs.SetBeforeFinish(func(_ context.Context, params []store.FinishParams) error {
			mu.Lock()
			inFlight++
			peak = max(peak, inFlight)
			sizes = append(sizes, len(params))
			mu.Unlock()
			<-release // a slow store
			mu.Lock()
			inFlight--
			mu.Unlock()
			return nil
		})
		r := testRuntime(t, fs, func(c *Config) { c.Workers = 10 })
		as := claimAttempts(t, r, fs, "k", 6, time.Minute)
		go r.completer.run()
		for _, batch := range [][]testAttempt{as[:2], as[2:4], as[4:]} {
			queueOutcomes(r, batch, nil)
			time.Sleep(10 * time.Millisecond) // past the flush interval
			synctest.Wait()
		}
		mu.Lock()
		require.Equal(t, []int{2, 2}, sizes, "the second batch waited for the first write")
		require.Equal(t, flushConcurrency, peak)
		mu.Unlock()
		close(release)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []int{2, 2, 2}, sizes, "the third batch went out once a write ended")
		require.Equal(t, flushConcurrency, peak)
		mu.Unlock()
		for _, a := range as {
			require.False(t, registered(r, a.attempt), "a written attempt stayed registered")
		}
		require.Zero(t, r.completer.stop(t.Context(), t.Context()))
	})
}
