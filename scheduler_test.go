package ax_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryJobRunsExactlyOnce schedules 10k jobs with random delays across
// kinds and priorities and checks each handler call happens once and every
// job ends succeeded.
func TestEveryJobRunsExactlyOnce(t *testing.T) {
	const jobs = 10_000
	st := newMemstore()
	s := newScheduler(t, st)
	var (
		mu   sync.Mutex
		runs = make(map[uuid.UUID]int, jobs)
		done = make(chan struct{})
		left atomic.Int64
	)
	left.Store(jobs)
	kinds := []string{"a", "b", "c"}
	for _, k := range kinds {
		require.NoError(t, s.Handle(k, ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			if left.Add(-1) == 0 {
				close(done)
			}
			return nil
		})))
	}
	start(t, s)

	reqs := make([]ax.Request, jobs)
	for i := range reqs {
		reqs[i] = ax.Request{
			Kind:    kinds[i%len(kinds)],
			Payload: i,
			Options: []ax.ScheduleOption{
				ax.In(time.Duration(rand.Int64N(int64(3 * time.Second)))),
				ax.Priority(ax.PriorityLevel(1 + i%3)),
			},
		}
	}
	res, err := s.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
	recv(t, done)

	for _, r := range res {
		rec := waitState(t, st, r.ID, store.StateSucceeded)
		require.Equal(t, 1, rec.Attempt)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, jobs)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
}

// TestNoJobStartsBeforeRunAt skews the host clock against the store's and
// checks no job starts before its run_at in the store's clock, and that
// jobs still start promptly.
func TestNoJobStartsBeforeRunAt(t *testing.T) {
	for _, skew := range []time.Duration{-30 * time.Second, 0, 30 * time.Second} {
		t.Run(fmt.Sprintf("host clock %+v", skew), func(t *testing.T) {
			storeClock := &fakeClock{}
			st := newMemstore(memstore.WithClock(storeClock.Now))
			s := newScheduler(t, st, func(c *ax.Config) {
				c.Clock = func() time.Time { return time.Now().Add(skew) }
			})
			const jobs = 200
			lags := make(chan time.Duration, jobs)
			require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
				storeNow := storeClock.Now()
				if storeNow.Before(j.RunAt) {
					t.Errorf("job started %s before its run_at", j.RunAt.Sub(storeNow))
				}
				lags <- j.ClaimLag()
				return nil
			})))
			start(t, s)
			for i := range jobs {
				_, err := s.Schedule(context.Background(), "k", nil, ax.In(time.Duration(i)*2*time.Millisecond+50*time.Millisecond))
				require.NoError(t, err)
			}
			for range jobs {
				lag := recv(t, lags)
				require.GreaterOrEqual(t, lag, time.Duration(0))
				// Generous: only catches a scheduler that waits for the
				// poll or misreads the skew (30 s).
				require.Less(t, lag, 2*time.Second)
			}
		})
	}
}

// TestTimeoutFailsAttemptAndRetries checks a handler over its kind's
// timeout sees a deadline, fails the attempt and is retried.
func TestTimeoutFailsAttemptAndRetries(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	var attempts atomic.Int32
	require.NoError(t, s.Handle("slow", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		if attempts.Add(1) == 1 {
			<-ctx.Done()
			require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
			return ctx.Err()
		}
		return nil
	}), ax.Timeout(30*time.Millisecond), ax.Retry(noDelay)))
	start(t, s)
	res, err := s.Schedule(context.Background(), "slow", nil)
	require.NoError(t, err)
	rec := waitState(t, st, res.ID, store.StateSucceeded)
	require.Equal(t, 2, rec.Attempt)
	require.Len(t, rec.Errors, 1)
	require.Contains(t, rec.Errors[0].Error, "timeout after 30ms")
	require.Contains(t, rec.Errors[0].Error, "deadline exceeded")
}

// TestLeaseLossCancelsHandlerAndDiscardsResult expires a running job's
// lease behind the scheduler's back (store clock jump + rescue): the
// handler's context is cancelled with ErrLeaseLost and its late success
// changes nothing; the next attempt decides the job's fate.
func TestLeaseLossCancelsHandlerAndDiscardsResult(t *testing.T) {
	storeClock := &fakeClock{}
	st := newMemstore(memstore.WithClock(storeClock.Now))
	s := newScheduler(t, st, func(c *ax.Config) {
		c.LeaseDuration = time.Second
		c.HeartbeatInterval = 20 * time.Millisecond
		c.RescueInterval = time.Hour // the test rescues by hand
	})
	started := make(chan int, 2)
	causes := make(chan error, 1)
	second := make(chan struct{})
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		started <- j.Attempt
		if j.Attempt == 1 {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil // a late "success" that must be discarded
		}
		<-second
		return errors.New("second attempt fails for good")
	}), ax.MaxAttempts(2)))
	start(t, s)
	res, err := s.Schedule(context.Background(), "k", nil)
	require.NoError(t, err)
	require.Equal(t, 1, recv(t, started))

	storeClock.Advance(time.Hour)
	rescued, err := st.RescueExpired(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, rescued, 1)

	require.ErrorIs(t, recv(t, causes), ax.ErrLeaseLost)
	require.Equal(t, 2, recv(t, started)) // rescued job re-claimed
	rec, err := st.Get(context.Background(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateRunning, rec.State, "the late success must not finish the job")
	close(second)
	rec = waitState(t, st, res.ID, store.StateDead)
	require.Equal(t, 2, rec.Attempt)
	require.Len(t, rec.Errors, 2)
	require.Contains(t, rec.Errors[0].Error, "lease expired")
}

// TestStopLetsRunningJobsFinish stops with a generous deadline while a job
// runs: it completes and Stop returns nil.
func TestStopLetsRunningJobsFinish(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	running := make(chan struct{})
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		close(running)
		time.Sleep(50 * time.Millisecond) // real work that outlives Stop's call
		return ctx.Err()
	})))
	start(t, s)
	res, err := s.Schedule(context.Background(), "k", nil)
	require.NoError(t, err)
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
	rec, err := st.Get(context.Background(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateSucceeded, rec.State)
}

// TestStopHandsBackUnfinishedJobs stops with a short deadline while a job
// blocks: the job goes back to scheduled without burning the attempt, at
// once, and a second scheduler on the same store runs it.
func TestStopHandsBackUnfinishedJobs(t *testing.T) {
	st := newMemstore()
	s1 := newScheduler(t, st, func(c *ax.Config) { c.LeaseDuration = time.Hour; c.HeartbeatInterval = time.Minute })
	running := make(chan struct{})
	causes := make(chan error, 1)
	require.NoError(t, s1.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		close(running)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})))
	start(t, s1)
	res, err := s1.Schedule(context.Background(), "k", nil)
	require.NoError(t, err)
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s1.Stop(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, recv(t, causes), ax.ErrStopping)

	rec, err := st.Get(context.Background(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, rec.State, "handed back, not left running until its 1h lease expires")
	require.Equal(t, 0, rec.Attempt, "the interrupted attempt is not counted")

	s2 := newScheduler(t, st)
	ran := make(chan int, 1)
	require.NoError(t, s2.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		ran <- j.Attempt
		return nil
	})))
	start(t, s2)
	require.Equal(t, 1, recv(t, ran))
	waitState(t, st, res.ID, store.StateSucceeded)
}

// TestOutcomes checks what each kind of handler result does to the job.
func TestOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		results     []error // the handler's result per attempt; nil after the list
		wantState   store.State
		wantAttempt int
		wantErrors  int
		errContains string
	}{
		{"success", 3, nil, store.StateSucceeded, 1, 0, ""},
		{"fails twice then succeeds", 5, []error{errors.New("boom"), errors.New("boom")}, store.StateSucceeded, 3, 2, "boom"},
		{"dead after max attempts", 2, []error{errors.New("x"), errors.New("y"), errors.New("z")}, store.StateDead, 2, 2, "y"},
		{"permanent error", 5, []error{ax.Permanent(errors.New("bad input"))}, store.StateDead, 1, 1, "bad input"},
		{"wrapped skip retry", 5, []error{fmt.Errorf("nope: %w", ax.ErrSkipRetry)}, store.StateDead, 1, 1, "nope"},
		{"snooze does not count", 2, []error{ax.Snooze(0), ax.Snooze(time.Millisecond), errors.New("once")}, store.StateSucceeded, 2, 1, "once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newMemstore()
			s := newScheduler(t, st)
			var calls atomic.Int32
			require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
				i := int(calls.Add(1)) - 1
				if i < len(tt.results) {
					return tt.results[i]
				}
				return nil
			}), ax.Retry(noDelay), ax.MaxAttempts(tt.maxAttempts)))
			start(t, s)
			res, err := s.Schedule(context.Background(), "k", nil)
			require.NoError(t, err)
			rec := waitState(t, st, res.ID, tt.wantState)
			assert.Equal(t, tt.wantAttempt, rec.Attempt)
			require.Len(t, rec.Errors, tt.wantErrors)
			if tt.wantErrors > 0 {
				assert.Contains(t, rec.Errors[len(rec.Errors)-1].Error, tt.errContains)
			}
		})
	}
}

// TestPanicIsRecordedWithStack checks a panicking handler fails its attempt
// with the panic value and stack, and the worker survives.
func TestPanicIsRecordedWithStack(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		if j.Attempt == 1 {
			panic("kaboom")
		}
		return nil
	}), ax.Retry(noDelay)))
	start(t, s)
	res, err := s.Schedule(context.Background(), "k", nil)
	require.NoError(t, err)
	rec := waitState(t, st, res.ID, store.StateSucceeded)
	require.Len(t, rec.Errors, 1)
	require.Contains(t, rec.Errors[0].Error, "panic: kaboom")
	require.Contains(t, rec.Errors[0].Error, "scheduler_test.go", "stack included")
}

// TestCancelRunningJob cancels a job while its handler runs: the handler's
// context is cancelled with ErrJobCancelled and the job ends cancelled.
func TestCancelRunningJob(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	running := make(chan struct{})
	causes := make(chan error, 1)
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		close(running)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})))
	start(t, s)
	res, err := s.Schedule(context.Background(), "k", nil)
	require.NoError(t, err)
	<-running
	rec, err := s.Cancel(context.Background(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateRunning, rec.State)
	require.ErrorIs(t, recv(t, causes), ax.ErrJobCancelled)
	waitState(t, st, res.ID, store.StateCancelled)
}

// TestPauseResumeRunNow drives a far-future job through the control API.
func TestPauseResumeRunNow(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	ran := make(chan uuid.UUID, 1)
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		ran <- j.ID
		return nil
	})))
	start(t, s)
	ctx := context.Background()
	res, err := s.Schedule(ctx, "k", nil, ax.In(time.Hour))
	require.NoError(t, err)

	rec, err := s.Pause(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatePaused, rec.State)
	rec, err = s.Resume(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, rec.State)
	_, err = s.RunNow(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, res.ID, recv(t, ran))
	waitState(t, st, res.ID, store.StateSucceeded)

	_, err = s.Pause(ctx, res.ID)
	require.ErrorIs(t, err, ax.ErrWrongState)
	_, err = s.Cancel(ctx, uuid.Must(uuid.NewV7()))
	require.ErrorIs(t, err, ax.ErrNotFound)
}

// TestUniqueKey checks a duplicate Schedule returns the holder's ID.
func TestUniqueKey(t *testing.T) {
	s := newScheduler(t, newMemstore())
	ctx := context.Background()
	first, err := s.Schedule(ctx, "k", nil, ax.UniqueKey("welcome:42"), ax.In(time.Hour))
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	dup, err := s.Schedule(ctx, "k", nil, ax.UniqueKey("welcome:42"))
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, first.ID, dup.ID)
}

// TestTypedHandler decodes a JSON payload into the handler's type, and a
// payload that does not decode fails permanently.
func TestTypedHandler(t *testing.T) {
	type email struct{ To string }
	st := newMemstore()
	s := newScheduler(t, st)
	got := make(chan email, 1)
	require.NoError(t, ax.Handle(s, "email", func(ctx context.Context, j *ax.Job, p email) error {
		got <- p
		return nil
	}))
	start(t, s)
	ctx := context.Background()
	_, err := s.Schedule(ctx, "email", email{To: "a@example.com"})
	require.NoError(t, err)
	require.Equal(t, "a@example.com", recv(t, got).To)

	bad, err := s.Schedule(ctx, "email", []int{1, 2})
	require.NoError(t, err)
	rec := waitState(t, st, bad.ID, store.StateDead)
	require.Equal(t, 1, rec.Attempt)
	require.Contains(t, rec.Errors[0].Error, "decode email payload")
}

// TestPerKindConcurrency checks a kind never runs more handlers at once
// than its Concurrency.
func TestPerKindConcurrency(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st)
	var running, peak atomic.Int32
	var wg sync.WaitGroup
	wg.Add(20)
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		defer wg.Done()
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // hold the slot so others would overlap
		running.Add(-1)
		return nil
	}), ax.Concurrency(2)))
	start(t, s)
	reqs := make([]ax.Request, 20)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "k"}
	}
	_, err := s.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int32(2))
}

// TestPriorityOrder checks due High jobs run before Normal before Low.
func TestPriorityOrder(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st, func(c *ax.Config) { c.Workers = 1 })
	order := make(chan ax.PriorityLevel, 30)
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		order <- j.Priority
		return nil
	})))
	var reqs []ax.Request
	for i := range 30 {
		reqs = append(reqs, ax.Request{Kind: "k", Options: []ax.ScheduleOption{ax.Priority(ax.PriorityLevel(3 - i%3))}})
	}
	_, err := s.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
	start(t, s) // all due before the first claim
	last := ax.High
	for range 30 {
		p := recv(t, order)
		require.GreaterOrEqual(t, p, last)
		last = p
	}
}

// TestLocalScheduleWakesWithoutNotifications checks a job scheduled on a
// host that handles its kind wakes that host's claimer directly, even when
// the store sends no notifications and the poll is an hour away.
func TestLocalScheduleWakesWithoutNotifications(t *testing.T) {
	st := struct{ store.Store }{newMemstore()} // hides memstore's Notifier
	s := newScheduler(t, st, func(c *ax.Config) { c.PollInterval = time.Hour })
	ran := make(chan struct{}, 2)
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran <- struct{}{}
		return nil
	})))
	start(t, s)
	for _, opts := range [][]ax.ScheduleOption{nil, {ax.In(20 * time.Millisecond)}} {
		_, err := s.Schedule(context.Background(), "k", nil, opts...)
		require.NoError(t, err)
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatalf("job scheduled with %d option(s) did not run without a poll", len(opts))
		}
	}
}

// TestStopAbandonsHandlersThatIgnoreCancellation checks the promise on
// Stop: a handler that ignores its context is waited for at most
// ReleaseTimeout after the hand-back, its job is already back in the store,
// and its late result changes nothing.
func TestStopAbandonsHandlersThatIgnoreCancellation(t *testing.T) {
	st := newMemstore()
	s := newScheduler(t, st, func(c *ax.Config) { c.ReleaseTimeout = 50 * time.Millisecond })
	running := make(chan struct{})
	release := make(chan struct{})
	returned := make(chan struct{})
	require.NoError(t, s.Handle("stubborn", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		defer close(returned)
		close(running)
		<-release // ignores ctx
		return nil
	})))
	start(t, s)
	res, err := s.Schedule(context.Background(), "stubborn", nil)
	require.NoError(t, err)
	<-running

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for a handler that ignores its context")
	}
	rec, err := st.Get(context.Background(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, rec.State, "handed back before Stop returned")
	require.Equal(t, 0, rec.Attempt)

	close(release) // the late "success" must change nothing
	<-returned
	rec, err = st.Get(context.Background(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, rec.State)
}
