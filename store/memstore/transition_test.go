package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// jobIn inserts a job with a unique key and moves it to state. The clock
// does not move.
func jobIn(t *testing.T, st *memstore.Store, state store.State) *store.JobRecord {
	t.Helper()
	ctx := context.Background()
	p := params("k")
	p.UniqueKey = "key"
	insert(t, st, p)
	switch state {
	case store.StateScheduled:
	case store.StatePaused:
		_, err := st.Control(ctx, p.ID, store.OpPause)
		require.NoError(t, err)
	case store.StateCancelled:
		_, err := st.Control(ctx, p.ID, store.OpCancel)
		require.NoError(t, err)
	default:
		j := claim(t, st, 1, "k").Jobs[0]
		switch state {
		case store.StateRetrying:
			finish(t, st, j, store.OutcomeRetry)
		case store.StateSucceeded:
			finish(t, st, j, store.OutcomeSucceeded)
		case store.StateDead:
			finish(t, st, j, store.OutcomeDead)
		}
	}
	j, err := st.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, state, j.State)
	return j
}

func TestControlTransitions(t *testing.T) {
	const wrong = store.State("") // the op fails with ErrWrongState
	tests := []struct {
		from store.State
		op   store.ControlOp
		want store.State
	}{
		{store.StateScheduled, store.OpCancel, store.StateCancelled},
		{store.StateRetrying, store.OpCancel, store.StateCancelled},
		{store.StatePaused, store.OpCancel, store.StateCancelled},
		{store.StateRunning, store.OpCancel, store.StateRunning},
		{store.StateCancelled, store.OpCancel, store.StateCancelled},
		{store.StateSucceeded, store.OpCancel, wrong},
		{store.StateDead, store.OpCancel, wrong},

		{store.StateScheduled, store.OpPause, store.StatePaused},
		{store.StateRetrying, store.OpPause, store.StatePaused},
		{store.StatePaused, store.OpPause, store.StatePaused},
		{store.StateRunning, store.OpPause, store.StateRunning},
		{store.StateSucceeded, store.OpPause, wrong},
		{store.StateDead, store.OpPause, wrong},
		{store.StateCancelled, store.OpPause, wrong},

		{store.StatePaused, store.OpResume, store.StateScheduled},
		{store.StateScheduled, store.OpResume, store.StateScheduled},
		{store.StateRetrying, store.OpResume, store.StateRetrying},
		{store.StateRunning, store.OpResume, store.StateRunning},
		{store.StateSucceeded, store.OpResume, wrong},
		{store.StateDead, store.OpResume, wrong},
		{store.StateCancelled, store.OpResume, wrong},

		{store.StateScheduled, store.OpRunNow, store.StateScheduled},
		{store.StateRetrying, store.OpRunNow, store.StateScheduled},
		{store.StatePaused, store.OpRunNow, store.StateScheduled},
		{store.StateDead, store.OpRunNow, store.StateScheduled},
		{store.StateCancelled, store.OpRunNow, store.StateScheduled},
		{store.StateRunning, store.OpRunNow, wrong},
		{store.StateSucceeded, store.OpRunNow, wrong},
	}
	for _, tt := range tests {
		t.Run(string(tt.from)+"/"+tt.op.String(), func(t *testing.T) {
			st, clk := newStore(t)
			ctx := context.Background()
			before := jobIn(t, st, tt.from)
			clk.Add(time.Second)

			got, err := st.Control(ctx, before.ID, tt.op)
			after, getErr := st.Get(ctx, before.ID)
			require.NoError(t, getErr)
			if tt.want == wrong {
				require.ErrorIs(t, err, store.ErrWrongState)
				require.Equal(t, before, after, "a refused op changes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, after, got, "Control returns the job as it is afterwards")
			assert.Equal(t, tt.want, got.State)
			assert.Equal(t, tt.want.Final(), !got.FinishedAt.IsZero())
		})
	}
}

func TestControlRunNowDetails(t *testing.T) {
	st, clk := newStore(t)
	ctx := context.Background()
	dead := jobIn(t, st, store.StateDead)
	clk.Add(time.Minute)
	got, err := st.Control(ctx, dead.ID, store.OpRunNow)
	require.NoError(t, err)
	assert.Equal(t, clk.Now(), got.RunAt)
	assert.Equal(t, dead.Attempt, got.Attempt, "the next attempt is numbered on")
	assert.Equal(t, max(dead.MaxAttempts, dead.Attempt+1), got.MaxAttempts, "one more attempt allowed")
	assert.Equal(t, dead.Errors, got.Errors, "errors kept")
	assert.True(t, got.FinishedAt.IsZero())

	_, err = st.Control(ctx, got.ID, store.OpPause)
	require.NoError(t, err)
	got, err = st.Control(ctx, got.ID, store.OpResume)
	require.NoError(t, err)
	assert.Equal(t, clk.Now(), got.RunAt, "resume keeps run_at")
}

func TestFinishOutcomes(t *testing.T) {
	const delay = 10 * time.Second
	tests := []struct {
		name           string
		out            store.Outcome
		requests       []store.ControlOp // made while the job runs
		wantState      store.State
		wantAttempt    int
		wantRunAtDelay time.Duration // run_at - now, for claimable and paused results
		wantErrors     int
		wantKeyHeld    bool // in the default scope: only while live
	}{
		{"Succeeded", store.OutcomeSucceeded, nil, store.StateSucceeded, 1, 0, 0, false},
		{"Retry", store.OutcomeRetry, nil, store.StateRetrying, 1, delay, 1, true},
		{"Dead", store.OutcomeDead, nil, store.StateDead, 1, 0, 1, false},
		{"Snooze", store.OutcomeSnooze, nil, store.StateScheduled, 0, delay, 0, true},
		{"Release", store.OutcomeRelease, nil, store.StateScheduled, 0, 0, 0, true},
		{"Cancelled", store.OutcomeCancelled, nil, store.StateCancelled, 1, 0, 1, false},
		{"RetryCancelRequested", store.OutcomeRetry, []store.ControlOp{store.OpCancel}, store.StateCancelled, 1, 0, 1, false},
		{"SnoozeCancelRequested", store.OutcomeSnooze, []store.ControlOp{store.OpCancel}, store.StateCancelled, 1, 0, 0, false},
		{"ReleaseCancelRequested", store.OutcomeRelease, []store.ControlOp{store.OpCancel}, store.StateCancelled, 1, 0, 0, false},
		{"SucceededCancelRequested", store.OutcomeSucceeded, []store.ControlOp{store.OpCancel}, store.StateSucceeded, 1, 0, 0, false},
		{"DeadCancelRequested", store.OutcomeDead, []store.ControlOp{store.OpCancel}, store.StateDead, 1, 0, 1, false},
		{"RetryPauseRequested", store.OutcomeRetry, []store.ControlOp{store.OpPause}, store.StatePaused, 1, delay, 1, true},
		{"SnoozePauseRequested", store.OutcomeSnooze, []store.ControlOp{store.OpPause}, store.StatePaused, 0, delay, 0, true},
		{"ReleasePauseRequested", store.OutcomeRelease, []store.ControlOp{store.OpPause}, store.StatePaused, 0, 0, 0, true},
		{"SucceededPauseRequested", store.OutcomeSucceeded, []store.ControlOp{store.OpPause}, store.StateSucceeded, 1, 0, 0, false},
		{"DeadPauseRequested", store.OutcomeDead, []store.ControlOp{store.OpPause}, store.StateDead, 1, 0, 1, false},
		{"CancelledPauseRequested", store.OutcomeCancelled, []store.ControlOp{store.OpPause}, store.StateCancelled, 1, 0, 1, false},
		{"RetryBothRequested", store.OutcomeRetry, []store.ControlOp{store.OpCancel, store.OpPause}, store.StateCancelled, 1, 0, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, clk := newStore(t)
			ctx := context.Background()
			j := jobIn(t, st, store.StateRunning)
			for _, op := range tt.requests {
				_, err := st.Control(ctx, j.ID, op)
				require.NoError(t, err)
			}
			clk.Add(time.Second)
			now := clk.Now()
			lease := store.Lease{ID: j.ID, Token: j.LeaseToken}
			ok, err := st.Finish(ctx, []store.FinishParams{
				{Lease: lease, Outcome: tt.out, Delay: delay, Error: "boom"},
				{Lease: lease, Outcome: tt.out, Delay: delay, Error: "again"}, // lease gone
			})
			require.NoError(t, err)
			require.Equal(t, []bool{true, false}, ok)

			got, err := st.Get(ctx, j.ID)
			require.NoError(t, err)
			assert.Equal(t, tt.wantState, got.State)
			assert.Equal(t, tt.wantAttempt, got.Attempt)
			assert.Len(t, got.Errors, tt.wantErrors)
			assert.Equal(t, tt.wantState.Final(), got.FinishedAt.Equal(now))
			if !tt.wantState.Final() {
				assert.Equal(t, now.Add(tt.wantRunAtDelay), got.RunAt)
			}
			assert.Equal(t, j.ScheduledAt, got.ScheduledAt)
			assert.Equal(t, int64(1), got.Fence)
			assert.False(t, got.CancelRequested)
			assert.False(t, got.PauseRequested)
			assert.Equal(t, uuid.Nil, got.LeaseToken)
			assert.True(t, got.LeaseExpiresAt.IsZero())
			assert.Equal(t, "node-1", got.Owner)

			p := params("k")
			p.UniqueKey = "key"
			res := insert(t, st, p)
			assert.Equal(t, tt.wantKeyHeld, res[0].Duplicate)
		})
	}
}

func TestExtendLeases(t *testing.T) {
	st, clk := newStore(t)
	ctx := context.Background()
	for range 3 {
		insert(t, st, params("k"))
	}
	jobs := claim(t, st, 3, "k").Jobs
	held, cancelled, finished := jobs[0], jobs[1], jobs[2]
	_, err := st.Control(ctx, cancelled.ID, store.OpCancel)
	require.NoError(t, err)
	finish(t, st, finished, store.OutcomeSucceeded)
	clk.Add(2 * time.Minute) // past the leases, which stay held until rescued

	stale := store.Lease{ID: held.ID, Token: cancelled.LeaseToken}
	missing := store.Lease{ID: params("k").ID, Token: held.LeaseToken}
	res, err := st.ExtendLeases(ctx, &store.ExtendParams{
		Leases: []store.Lease{
			{ID: held.ID, Token: held.LeaseToken},
			{ID: cancelled.ID, Token: cancelled.LeaseToken},
			{ID: finished.ID, Token: finished.LeaseToken},
			stale, missing,
		},
		Duration: time.Hour,
	})
	require.NoError(t, err)
	assert.Equal(t, []store.Lease{{ID: finished.ID, Token: finished.LeaseToken}, stale, missing}, res.Lost)
	assert.Equal(t, []store.Lease{{ID: cancelled.ID, Token: cancelled.LeaseToken}}, res.CancelRequested)

	rescued, err := st.RescueExpired(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, rescued, "extended leases are not rescued")
	got, err := st.Get(ctx, held.ID)
	require.NoError(t, err)
	assert.Equal(t, clk.Now().Add(time.Hour), got.LeaseExpiresAt)
}
