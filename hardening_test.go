package ax_test

// Regression tests for the runtime defects of the hardening issue, one per
// defect and named after it. Each failed on the runtime before the fix (see
// the closing note of the issue for the failures seen) and runs in a
// synctest bubble, so its timings are exact and its waits free.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// strictFinish makes a FaultStore refuse, as PostgreSQL does, a Finish
// batch holding a row it cannot store: an error text with a NUL byte or
// invalid UTF-8, or a negative delay.
func strictFinish(_ context.Context, params []store.FinishParams) error {
	for _, p := range params {
		if err := store.CheckText(p.Error, 0); err != nil {
			return fmt.Errorf("%w: invalid byte sequence for encoding \"UTF8\": %w", store.ErrInvalidParams, err)
		}
		if p.Delay < 0 {
			return fmt.Errorf("%w: negative delay", store.ErrInvalidParams)
		}
	}
	return nil
}

// TestDefect1BadOutcomeStopsHost: handlers return errors PostgreSQL cannot
// store (a NUL byte, invalid UTF-8, 100 kB of text) and a hand-built
// SnoozeError with a negative delay. Their outcomes are cleaned before they
// reach the store, so every job, good and bad, gets its outcome written,
// and Stop reports nothing lost. (Before: every flush failed and was
// retried forever; every later outcome queued behind it.)
func TestDefect1BadOutcomeStopsHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := ax.NewFaultStore(memstore.New())
		fs.SetBeforeFinish(strictFinish)
		s := newScheduler(t, fs, func(c *ax.Config) { c.RetryPolicy = noDelay })
		bad := map[string]error{
			"nul":    errors.New("bad\x00byte"),
			"utf8":   errors.New("bad \xff\xfe utf8"),
			"long":   errors.New(strings.Repeat("x", 100<<10)),
			"snooze": &ax.SnoozeError{Delay: -time.Second},
		}
		for kind, err := range bad {
			require.NoError(t, s.Handle(kind, ax.HandlerFunc(func(context.Context, *ax.Job) error { return err }), ax.MaxAttempts(1)))
		}
		require.NoError(t, s.Handle("good", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
		start(t, s)
		ids := map[string]uuid.UUID{}
		for kind := range bad {
			res, err := s.Schedule(t.Context(), kind, nil)
			require.NoError(t, err)
			ids[kind] = res.ID
		}
		var good []uuid.UUID
		for range 20 {
			res, err := s.Schedule(t.Context(), "good", nil)
			require.NoError(t, err)
			good = append(good, res.ID)
		}
		time.Sleep(time.Second)
		synctest.Wait()

		for _, id := range good {
			require.Equal(t, store.StateSucceeded, get(t, fs, id).State)
		}
		for _, kind := range []string{"nul", "utf8", "long"} {
			rec := get(t, fs, ids[kind])
			require.Equal(t, store.StateDead, rec.State, kind)
			require.Len(t, rec.Errors, 1)
			require.NoError(t, store.CheckText(rec.Errors[0].Error, store.MaxErrorLength), "%s: stored error text", kind)
		}
		require.Contains(t, get(t, fs, ids["long"]).Errors[0].Error, "bytes cut]")
		snoozed := get(t, fs, ids["snooze"])
		require.Contains(t, []store.State{store.StateScheduled, store.StateRunning, store.StateSucceeded}, snoozed.State,
			"a negative snooze is a snooze of zero")
		require.NoError(t, s.Stop(t.Context()))
	})
}

// TestDefect1RefusedOutcomeIsIsolated: a store refuses one row of a batch
// (store.ErrInvalidParams). The batch is split until that row stands alone:
// every other outcome of the batch is written, the refused attempt is no
// longer extended, so its job is rescued when its lease expires, and Stop
// reports the outcome it could not write. (Before: the whole batch was
// retried forever, and its jobs stayed running.)
func TestDefect1RefusedOutcomeIsIsolated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := ax.NewFaultStore(memstore.New())
		fs.SetBeforeFinish(func(_ context.Context, params []store.FinishParams) error {
			for _, p := range params {
				if strings.Contains(p.Error, "poison") {
					return fmt.Errorf("%w: poison row", store.ErrInvalidParams)
				}
			}
			return nil
		})
		release := make(chan struct{})
		s := newScheduler(t, fs, func(c *ax.Config) {
			c.LeaseDuration = time.Second
			c.RescueInterval = 100 * time.Millisecond
			c.FlushInterval = 50 * time.Millisecond // the outcomes meet in one batch
		})
		work := func(err error) ax.HandlerFunc {
			return func(ctx context.Context, _ *ax.Job) error {
				<-release
				return err
			}
		}
		require.NoError(t, s.Handle("good", work(nil)))
		require.NoError(t, s.Handle("poison", work(errors.New("poison")), ax.MaxAttempts(1)))
		start(t, s)
		poison, err := s.Schedule(t.Context(), "poison", nil)
		require.NoError(t, err)
		var good []uuid.UUID
		for range 30 {
			res, err := s.Schedule(t.Context(), "good", nil)
			require.NoError(t, err)
			good = append(good, res.ID)
		}
		synctest.Wait()
		close(release) // all 31 outcomes arrive within one flush interval
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		for _, id := range good {
			require.Equal(t, store.StateSucceeded, get(t, fs, id).State)
		}
		require.Equal(t, store.StateRunning, get(t, fs, poison.ID).State, "the refused outcome is not written")

		// No longer extended: rescued once its lease expires, and dead
		// (its only attempt was used).
		time.Sleep(time.Second + 200*time.Millisecond)
		synctest.Wait()
		rec := get(t, fs, poison.ID)
		require.Equal(t, store.StateDead, rec.State)
		require.Contains(t, rec.Errors[0].Error, "lease expired")

		err = s.Stop(t.Context())
		require.ErrorIs(t, err, ax.ErrOutcomesNotWritten)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	})
}

// TestDefect2ReclaimedJobLosesHeartbeat: a job fails, its retry is due at
// once and is claimed again by the same host while the first attempt's
// outcome write has not returned yet. The second attempt must keep its own
// registry entry and heartbeat: it runs once, for several lease durations,
// and nothing rescues it or runs it twice at once. (Before: the first
// attempt's completion deleted the job's entry, the second attempt was no
// longer extended, was rescued, and ran again concurrently.)
func TestDefect2ReclaimedJobLosesHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := ax.NewFaultStore(memstore.New())
		var (
			jobID     atomic.Value
			reclaimed = make(chan struct{})
			once      sync.Once
		)
		fs.SetAfterClaim(func(res *store.ClaimResult) {
			for _, j := range res.Jobs {
				if id, _ := jobID.Load().(uuid.UUID); j.ID == id && j.Attempt == 2 {
					once.Do(func() { close(reclaimed) })
				}
			}
		})
		fs.SetAfterFinish(func(_ context.Context, params []store.FinishParams, _ []bool) {
			for _, p := range params {
				if p.Outcome == store.OutcomeRetry {
					<-reclaimed                      // the retry was claimed again...
					time.Sleep(5 * time.Millisecond) // ...and launched, before this write returns
				}
			}
		})
		const lease = 300 * time.Millisecond
		s := newScheduler(t, fs, func(c *ax.Config) {
			c.LeaseDuration = lease
			c.RescueInterval = 50 * time.Millisecond
			c.RetryPolicy = noDelay
		})
		var running, maxRunning, runs atomic.Int64
		require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
			runs.Add(1)
			n := running.Add(1)
			defer running.Add(-1)
			for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
			}
			if j.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			select {
			case <-time.After(5 * lease):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})))
		start(t, s)
		res, err := s.Schedule(t.Context(), "k", nil)
		require.NoError(t, err)
		jobID.Store(res.ID)
		time.Sleep(7 * lease)
		synctest.Wait()
		require.Equal(t, int64(1), maxRunning.Load(), "two attempts ran at once")
		require.Equal(t, int64(2), runs.Load(), "the job ran again")
		rec := get(t, fs, res.ID)
		require.Equal(t, store.StateSucceeded, rec.State)
		require.Equal(t, 2, rec.Attempt)
		require.Len(t, rec.Errors, 1, "only the first attempt failed; nothing was rescued")
	})
}

// TestDefect3CappedKindLosesWakeUp: a kind at its Concurrency cap is left
// out of the claim; when its slot frees, the claimer must look again at
// once, not at the next poll. With a second kind registered and a 10s
// PollInterval, five 20ms jobs of a Concurrency(1) kind start back to back.
// (Before: one start per PollInterval.)
func TestDefect3CappedKindLosesWakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = 10 * time.Second })
		var (
			mu     sync.Mutex
			starts []time.Time
		)
		require.NoError(t, s.Handle("capped", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			return nil
		}), ax.Concurrency(1)))
		require.NoError(t, s.Handle("other", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
		start(t, s)
		for range 5 {
			_, err := s.Schedule(t.Context(), "capped", nil)
			require.NoError(t, err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, starts, 5, "capped jobs waited for the poll")
		for i := 1; i < len(starts); i++ {
			gap := starts[i].Sub(starts[i-1])
			require.LessOrEqual(t, gap, 25*time.Millisecond, "start %d came %s after the previous one", i, gap)
		}
	})
}

// TestDefect4StopHangsWhileStoreDown: outcome writes hang (the store does
// not answer) while jobs keep finishing, so the completer's queue is full
// and a worker waits to queue its outcome. Stop must still return by its
// deadline plus ReleaseTimeout, and say outcomes were not written. (Before:
// the blocked worker held the completer's lock that Stop needed; a 500ms
// deadline blocked for seconds.)
func TestDefect4StopHangsWhileStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := ax.NewFaultStore(memstore.New())
		s := newScheduler(t, fs, func(c *ax.Config) {
			c.Workers = 2
			c.ReleaseTimeout = 200 * time.Millisecond
		})
		var finished atomic.Int64
		require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			finished.Add(1)
			return nil
		})))
		fs.SetBeforeFinish(func(ctx context.Context, _ []store.FinishParams) error {
			<-ctx.Done() // outcome writes hang
			return ctx.Err()
		})
		start(t, s)
		schedule := func(n int) {
			for range n {
				_, err := s.Schedule(t.Context(), "k", nil)
				require.NoError(t, err)
			}
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		queued := ax.OutcomeQueueCapacity(2)
		schedule(2) // their outcomes' write hangs
		// A second write takes a full queue (and hangs), then the queue
		// fills again, then two workers wait to queue theirs and the
		// last 8 jobs wait for them.
		schedule(2*queued + 10)
		require.Equal(t, int64(2+2*queued+2), finished.Load(), "two writes in flight, a full queue, two waiting for room")

		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		begin := time.Now()
		err := s.Stop(ctx)
		took := time.Since(begin)
		require.LessOrEqual(t, took, 700*time.Millisecond, "Stop overran its deadline plus ReleaseTimeout")
		require.ErrorIs(t, err, ax.ErrOutcomesNotWritten)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// TestDefect5StopLetsLeasesLapseBeforeLastFlush: the last outcome write
// takes three lease durations. Stop must keep the job's lease extended
// until it is written, so another host does not rescue and rerun a job
// that succeeded. (Before: Stop stopped the heartbeat first; the lease
// lapsed during the flush and the other host ran the job again.)
func TestDefect5StopLetsLeasesLapseBeforeLastFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := memstore.New()
		const lease = 300 * time.Millisecond
		var runs atomic.Int64
		handler := ax.HandlerFunc(func(context.Context, *ax.Job) error {
			runs.Add(1)
			return nil
		})
		cfg := func(c *ax.Config) {
			c.LeaseDuration = lease
			c.RescueInterval = 50 * time.Millisecond
		}
		slow := ax.NewFaultStore(shared)
		slow.SetBeforeFinish(func(ctx context.Context, _ []store.FinishParams) error {
			time.Sleep(3 * lease)
			return nil
		})
		a := newScheduler(t, slow, cfg)
		require.NoError(t, a.Handle("k", handler))
		start(t, a)
		res, err := a.Schedule(t.Context(), "k", nil)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, int64(1), runs.Load())

		b := newScheduler(t, shared, cfg) // a second host, ready to rescue and rerun
		require.NoError(t, b.Handle("k", handler))
		start(t, b)
		require.NoError(t, a.Stop(t.Context()))
		time.Sleep(2 * lease)
		synctest.Wait()
		require.Equal(t, store.StateSucceeded, get(t, shared, res.ID).State)
		require.Equal(t, int64(1), runs.Load(), "the job ran again on the other host")
	})
}

// TestDefect6StopOverrunsDeadline: a claim, a rescue or a start-up call
// the store never answers must not hold Stop past its deadline plus
// ReleaseTimeout, nor hold other methods while Start waits. (Before: the
// claim ran under its own 30s timeout, maintenance under 10 × 30s, and
// Start held the Scheduler's mutex across its store call.)
func TestDefect6StopOverrunsDeadline(t *testing.T) {
	for _, method := range []string{"Claim", "RescueExpired"} {
		t.Run(method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := ax.NewFaultStore(memstore.New())
				s := newScheduler(t, fs, func(c *ax.Config) {
					c.ReleaseTimeout = 100 * time.Millisecond
					c.RescueInterval = 10 * time.Millisecond
				})
				require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
				fs.SetBeforeCall(func(ctx context.Context, m string) error {
					if m == method {
						<-ctx.Done()
						return ctx.Err()
					}
					return nil
				})
				start(t, s)
				time.Sleep(50 * time.Millisecond)
				synctest.Wait()
				require.Positive(t, fs.Calls(method))

				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				begin := time.Now()
				_ = s.Stop(ctx)
				require.LessOrEqual(t, time.Since(begin), 300*time.Millisecond, "Stop waited for the hung %s", method)
			})
		})
	}
	t.Run("Start", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fs := ax.NewFaultStore(memstore.New())
			unblock := make(chan struct{})
			fs.SetBeforeCall(func(ctx context.Context, m string) error {
				if m == "Now" {
					<-unblock
				}
				return nil
			})
			s := newScheduler(t, fs)
			started := make(chan error, 1)
			go func() { started <- s.Start(context.Background()) }()
			synctest.Wait() // Start waits in the store call
			require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })),
				"Handle waited for Start's store call")
			_, err := s.Schedule(t.Context(), "k", nil)
			require.NoError(t, err)
			close(unblock)
			require.NoError(t, <-started)
		})
	})
}

// TestDefect7FailoverWaitsForLeader: the host that dies holds the
// maintenance leadership (LeaderTTL 10s). Its job must run elsewhere once
// its 1s lease expires and the next rescue runs, not once a new leader is
// elected. (Before: only the leader rescued, so failover took the leader
// TTL.)
func TestDefect7FailoverWaitsForLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := memstore.New()
		const (
			lease  = time.Second
			rescue = 250 * time.Millisecond
		)
		cfg := func(node string) func(*ax.Config) {
			return func(c *ax.Config) {
				c.Node = node
				c.LeaseDuration = lease
				c.RescueInterval = rescue
				c.LeaderTTL = 10 * time.Second
				c.ReleaseTimeout = 100 * time.Millisecond
			}
		}
		startedOn := make(chan string, 4)
		work := func(node string) ax.HandlerFunc {
			return func(ctx context.Context, _ *ax.Job) error {
				startedOn <- node
				<-ctx.Done()
				return ctx.Err()
			}
		}
		victimStore := ax.NewFaultStore(shared)
		victim := newScheduler(t, victimStore, cfg("victim"))
		require.NoError(t, victim.Handle("k", work("victim")))
		start(t, victim)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		nodes, err := victim.Nodes(t.Context())
		require.NoError(t, err)
		require.True(t, nodes[0].Leader, "the victim is not the leader")

		_, err = victim.Schedule(t.Context(), "k", nil)
		require.NoError(t, err)
		require.Equal(t, "victim", <-startedOn)
		survivor := newScheduler(t, shared, cfg("survivor"))
		require.NoError(t, survivor.Handle("k", work("survivor")))
		start(t, survivor)

		victimStore.Hang.Store(true) // the victim is cut off: no heartbeat, no leadership renewal
		cut := time.Now()
		require.Equal(t, "survivor", <-startedOn)
		took := time.Since(cut)
		t.Logf("failover took %s (lease %s, rescue interval %s, leader TTL 10s)", took, lease, rescue)
		require.LessOrEqual(t, took, lease+rescue*6/5+50*time.Millisecond, "failover waited for a new leader")
	})
}

// get reads a job from st or fails the test.
func get(t *testing.T, st store.Store, id uuid.UUID) *store.JobRecord {
	t.Helper()
	rec, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	return rec
}

// TestDefect12LogsMislead: the "job scheduled" line of a job scheduled
// with In() gives its delay, not a zero run_at; the rescue line names the
// rescued jobs and their dead owners; the dead-node line names the nodes;
// and every duration is a number of milliseconds in a field ending in
// _ms, never zap's Duration (seconds in production encoders, nanoseconds
// in others). (Before: "run_at": "00:00:00.000", counts only, and
// retry_in in seconds beside duration_ms.)
func TestDefect12LogsMislead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		shared := memstore.New()
		s := newScheduler(t, shared, func(c *ax.Config) {
			c.Logger = zap.New(core)
			c.RescueInterval = 100 * time.Millisecond
			c.LeaderTTL = 300 * time.Millisecond
			c.NodeTimeout = 200 * time.Millisecond
			c.RetryPolicy = ax.RetryPolicyFunc(func(int, error) time.Duration { return time.Hour })
		})
		require.NoError(t, s.Handle("fails", ax.HandlerFunc(func(context.Context, *ax.Job) error { return errors.New("no") })))
		start(t, s)
		ctx := t.Context()
		delayed, err := s.Schedule(ctx, "later", nil, ax.In(5*time.Second))
		require.NoError(t, err)
		_, err = s.Schedule(ctx, "fails", nil)
		require.NoError(t, err)
		orphan := scheduleOrphan(t, shared, "orphan")
		require.NoError(t, shared.HeartbeatNode(ctx, &store.NodeParams{Name: "ghost", TTL: 50 * time.Millisecond}))
		time.Sleep(time.Second)
		synctest.Wait()

		sched := logs.FilterMessage("job scheduled").Filter(func(e observer.LoggedEntry) bool {
			return e.ContextMap()["job_id"] == delayed.ID.String()
		}).All()
		require.Len(t, sched, 1)
		fields := sched[0].ContextMap()
		require.Equal(t, float64(5000), fields["delay_ms"])
		require.NotContains(t, fields, "run_at")

		rescued := logs.FilterMessageSnippet("rescued jobs").All()
		require.Len(t, rescued, 1)
		require.Equal(t, []any{orphan.String()}, rescued[0].ContextMap()["job_ids"])
		require.Equal(t, []any{"vanished"}, rescued[0].ContextMap()["owners"])

		dead := logs.FilterMessageSnippet("nodes stopped heartbeating").All()
		require.Len(t, dead, 1)
		require.Equal(t, []any{"ghost"}, dead[0].ContextMap()["nodes"])

		retry := logs.FilterMessage("job failed; retrying").All()
		require.Len(t, retry, 1)
		require.Equal(t, float64(time.Hour/time.Millisecond), retry[0].ContextMap()["retry_in_ms"])

		for _, e := range logs.All() {
			for _, f := range e.Context {
				require.NotEqual(t, zapcore.DurationType, f.Type, "%q: field %q is a zap.Duration", e.Message, f.Key)
				if strings.Contains(f.Key, "lag") || strings.Contains(f.Key, "duration") || strings.Contains(f.Key, "delay") ||
					strings.Contains(f.Key, "retry_in") || strings.Contains(f.Key, "timeout") || strings.Contains(f.Key, "ttl") {
					require.True(t, strings.HasSuffix(f.Key, "_ms"), "%q: duration field %q has no _ms suffix", e.Message, f.Key)
				}
			}
		}
	})
}
