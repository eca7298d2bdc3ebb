package ax

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestOutcome: what an attempt's result does to its job, and that every
// outcome handed to the store is one it can keep (text cleaned and
// bounded, delays never negative).
func TestOutcome(t *testing.T) {
	negative := RetryPolicyFunc(func(int, error) time.Duration { return -time.Hour })
	long := strings.Repeat("é", store.MaxErrorLength) // 2 bytes a rune
	tests := []struct {
		name        string
		err, cause  error
		attempt     int
		policy      RetryPolicy
		wantOutcome store.Outcome
		wantDelay   time.Duration
		wantError   string
	}{
		{name: "success", wantOutcome: store.OutcomeSucceeded},
		{name: "success after cancel", cause: ErrJobCancelled, wantOutcome: store.OutcomeSucceeded},
		{name: "cancelled", err: context.Canceled, cause: ErrJobCancelled, wantOutcome: store.OutcomeCancelled, wantError: "context canceled"},
		{name: "snooze", err: Snooze(time.Minute), wantOutcome: store.OutcomeSnooze, wantDelay: time.Minute},
		{name: "hand-built negative snooze", err: &SnoozeError{Delay: -time.Second}, wantOutcome: store.OutcomeSnooze},
		{name: "wrapped snooze", err: fmt.Errorf("later: %w", Snooze(time.Second)), wantOutcome: store.OutcomeSnooze, wantDelay: time.Second},
		{name: "permanent", err: Permanent(errors.New("bad")), wantOutcome: store.OutcomeDead, wantError: "permanent: bad"},
		{name: "last attempt", err: errors.New("boom"), attempt: 3, wantOutcome: store.OutcomeDead, wantError: "boom"},
		{name: "retry", err: errors.New("boom"), policy: RetryPolicyFunc(func(int, error) time.Duration { return time.Second }),
			wantOutcome: store.OutcomeRetry, wantDelay: time.Second, wantError: "boom"},
		{name: "negative retry delay", err: errors.New("boom"), policy: negative, wantOutcome: store.OutcomeRetry, wantError: "boom"},
		{name: "NUL in error", err: errors.New("a\x00b"), wantOutcome: store.OutcomeRetry, wantError: "ab"},
		{name: "invalid UTF-8 in error", err: errors.New("a\xffb"), wantOutcome: store.OutcomeRetry, wantError: "a\uFFFDb"},
		{name: "long error", err: errors.New(long), wantOutcome: store.OutcomeRetry,
			// Cut at a rune boundary, room left for the note.
			wantError: long[:32746] + "… [32790 bytes cut]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy := tt.policy
			if policy == nil {
				policy = RetryPolicyFunc(func(int, error) time.Duration { return 0 })
			}
			a := &attempt{job: &Job{Attempt: max(tt.attempt, 1), MaxAttempts: 3},
				kind: &kindHandler{settings: handlerSettings{retry: policy}}}
			p := outcome(a, tt.err, tt.cause)
			require.Equal(t, tt.wantOutcome, p.Outcome)
			require.Equal(t, tt.wantDelay, p.Delay)
			require.Equal(t, tt.wantError, p.Error)
			require.NoError(t, p.Validate(), "an outcome the store would refuse")
		})
	}
}

// TestFinishDiscardsLostAttempts: the result of an attempt whose lease was
// lost, or that Stop handed back, is never written: the attempt leaves
// the registry and frees its slot without reaching the completer.
func TestFinishDiscardsLostAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		r := testRuntime(t, fs)
		as := claimAttempts(t, r, fs, "k", 3, time.Minute)
		r.mu.Lock()
		as[0].lost = true
		as[1].released = true
		r.free -= 3
		r.busy["k"] = 3
		r.mu.Unlock()
		go r.completer.run()
		for _, a := range as {
			r.finish(a.attempt, nil, nil, time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, int64(1), fs.Calls("Finish"))
		for i, a := range as {
			require.False(t, registered(r, a.attempt), "attempt %d", i)
			rec, err := fs.Get(t.Context(), a.lease.ID)
			require.NoError(t, err)
			want := store.StateRunning
			if i == 2 {
				want = store.StateSucceeded
			}
			require.Equal(t, want, rec.State, "attempt %d", i)
		}
		r.mu.Lock()
		require.Equal(t, r.cfg.Workers, r.free)
		require.Zero(t, r.busy["k"])
		r.mu.Unlock()
		require.Zero(t, r.completer.stop(t.Context(), t.Context()))
	})
}
