package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// endCheck checks a job after the end of an attempt: running is the job as
// claimed, got as read afterwards, and [from, to] brackets the store clock
// around the end.
type endCheck func(t *testing.T, running, got *store.JobRecord, from, to time.Time)

// runAtIn checks that run_at is the end's store now + d.
func runAtIn(d time.Duration) endCheck {
	return func(t *testing.T, _, got *store.JobRecord, from, to time.Time) {
		t.Helper()
		requireBetween(t, from.Add(d), to.Add(d), got.RunAt, "run_at = store now + delay")
	}
}

// endedFinal checks FinishedAt is the end's store now.
func endedFinal(t *testing.T, _, got *store.JobRecord, from, to time.Time) {
	t.Helper()
	requireBetween(t, from, to, got.FinishedAt, "FinishedAt")
}

// endedLive checks FinishedAt is not set.
func endedLive(t *testing.T, _, got *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.True(t, got.FinishedAt.IsZero(), "FinishedAt %s on a live job", got.FinishedAt)
}

// errorsAre checks the recorded error texts, all of attempt 1.
func errorsAre(texts ...string) endCheck {
	return func(t *testing.T, _, got *store.JobRecord, _, _ time.Time) {
		t.Helper()
		requireErrors(t, got, texts, []int{1, 1, 1}[:len(texts)])
	}
}

// requireLeftRunning checks what every end of an attempt clears or keeps.
func requireLeftRunning(t *testing.T, running, got *store.JobRecord) {
	t.Helper()
	requireLeaseCleared(t, got)
	require.False(t, got.PauseRequested, "pause request kept after the attempt ended")
	require.False(t, got.CancelRequested, "cancel request kept after the attempt ended")
	require.Equal(t, owner, got.Owner, "Owner names the node that last held the job")
	require.Equal(t, running.Fence, got.Fence, "only a claim moves the fence")
	requireTimeNear(t, running.ScheduledAt, got.ScheduledAt, 0, "ScheduledAt never changes")
}

// testPauseRunning checks OpPause and OpResume on running jobs: the pause
// request, where each end of the attempt takes the job, rescues, a cancel
// winning over a pause, and that paused jobs are neither claimed nor
// announced to listeners.
func testPauseRunning(t *testing.T, newStore NewStoreFunc) {
	t.Run("Request", func(t *testing.T) {
		st := newStore(t)
		running := makeJob(t, st, store.StateRunning, "pause")
		requested := control(t, st, running.ID, store.OpPause)
		require.Equal(t, store.StateRunning, requested.State, "a pause never interrupts an attempt")
		require.True(t, requested.PauseRequested)
		requireSameRecord(t, requested, get(t, st, running.ID))

		again := control(t, st, running.ID, store.OpPause)
		requireSameRecord(t, requested, again, "a second pause changes nothing")

		// The lease is still held, and the request is not a cancel.
		res := extend(t, st, longLease, lease(running))
		require.Empty(t, res.Lost)
		require.Empty(t, res.CancelRequested)

		withdrawn := control(t, st, running.ID, store.OpResume)
		require.Equal(t, store.StateRunning, withdrawn.State)
		require.False(t, withdrawn.PauseRequested, "resume withdraws the request")
		requireSameRecord(t, withdrawn, get(t, st, running.ID))
	})

	t.Run("Outcomes", func(t *testing.T) {
		cases := []struct {
			name string
			// requests are made while the job runs, after its pause.
			requests  []store.ControlOp
			outcome   store.Outcome
			delay     time.Duration
			errText   string
			wantState store.State
			attempt   int
			checks    []endCheck
		}{
			{"RetryDelayed", nil, store.OutcomeRetry, 10 * time.Minute, "boom", store.StatePaused, 1, []endCheck{runAtIn(10 * time.Minute), endedLive, errorsAre("boom")}},
			{"RetryNow", nil, store.OutcomeRetry, 0, "boom", store.StatePaused, 1, []endCheck{runAtIn(0), endedLive, errorsAre("boom")}},
			{"Snooze", nil, store.OutcomeSnooze, 7 * time.Minute, "", store.StatePaused, 0, []endCheck{runAtIn(7 * time.Minute), endedLive, errorsAre()}},
			{"Release", nil, store.OutcomeRelease, 0, "", store.StatePaused, 0, []endCheck{runAtIn(0), endedLive, errorsAre()}},
			{"Succeeded", nil, store.OutcomeSucceeded, 0, "", store.StateSucceeded, 1, []endCheck{endedFinal, errorsAre()}},
			{"Dead", nil, store.OutcomeDead, 0, "fatal", store.StateDead, 1, []endCheck{endedFinal, errorsAre("fatal")}},
			{"Cancelled", nil, store.OutcomeCancelled, 0, "stopped", store.StateCancelled, 1, []endCheck{endedFinal, errorsAre("stopped")}},
			{"RetryCancelWins", []store.ControlOp{store.OpCancel}, store.OutcomeRetry, time.Minute, "boom", store.StateCancelled, 1, []endCheck{endedFinal, errorsAre("boom")}},
			{"SnoozeCancelWins", []store.ControlOp{store.OpCancel}, store.OutcomeSnooze, time.Minute, "", store.StateCancelled, 1, []endCheck{endedFinal, errorsAre()}},
			{"ReleaseCancelWins", []store.ControlOp{store.OpCancel}, store.OutcomeRelease, 0, "", store.StateCancelled, 1, []endCheck{endedFinal, errorsAre()}},
			{"RetryAfterResume", []store.ControlOp{store.OpResume}, store.OutcomeRetry, 10 * time.Minute, "boom", store.StateRetrying, 1, []endCheck{runAtIn(10 * time.Minute), endedLive, errorsAre("boom")}},
			{"ReleaseAfterResume", []store.ControlOp{store.OpResume}, store.OutcomeRelease, 0, "", store.StateScheduled, 0, []endCheck{runAtIn(0), endedLive, errorsAre()}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				running := makeJob(t, st, store.StateRunning, "pause")
				control(t, st, running.ID, store.OpPause)
				for _, op := range c.requests {
					control(t, st, running.ID, op)
				}
				from := storeNow(t, st)
				got := finishOne(t, st, running, store.FinishParams{Outcome: c.outcome, Delay: c.delay, Error: c.errText})
				to := storeNow(t, st)

				require.Equal(t, c.wantState, got.State)
				require.Equal(t, c.attempt, got.Attempt)
				requireLeftRunning(t, running, got)
				for _, check := range c.checks {
					check(t, running, got, from, to)
				}
			})
		}
	})

	t.Run("Rescue", func(t *testing.T) {
		cases := []struct {
			name        string
			maxAttempts int
			requests    []store.ControlOp // made after the pause
			wantState   store.State
			checks      []endCheck
		}{
			{"AttemptsLeft", 2, nil, store.StatePaused, []endCheck{runAtIn(0), endedLive}},
			{"LastAttempt", 1, nil, store.StateDead, []endCheck{endedFinal}},
			{"CancelWins", 2, []store.ControlOp{store.OpCancel}, store.StateCancelled, []endCheck{endedFinal}},
			{"Resumed", 2, []store.ControlOp{store.OpResume}, store.StateRetrying, []endCheck{runAtIn(0), endedLive}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				id := insertOne(t, st, "pause", withMaxAttempts(c.maxAttempts))
				running := claimOnly(t, st, "pause", id, shortLease)
				control(t, st, id, store.OpPause)
				for _, op := range c.requests {
					control(t, st, id, op)
				}
				waitUntilStoreTime(t, st, running.LeaseExpiresAt)

				from := storeNow(t, st)
				rescued, err := st.RescueExpired(t.Context(), 10)
				require.NoError(t, err)
				to := storeNow(t, st)
				require.Equal(t, []store.Rescued{{ID: id, Kind: "pause", Owner: owner, Attempt: 1, State: c.wantState}}, rescued)

				got := get(t, st, id)
				require.Equal(t, c.wantState, got.State)
				require.Equal(t, 1, got.Attempt, "the expired attempt counts")
				require.Len(t, got.Errors, 1)
				require.Contains(t, got.Errors[0].Error, leaseExpiredError)
				requireLeftRunning(t, running, got)
				for _, check := range c.checks {
					check(t, running, got, from, to)
				}
			})
		}
	})

	t.Run("OtherStates", func(t *testing.T) {
		cases := []struct {
			state   store.State
			wantErr error // nil: no change
		}{
			{store.StatePaused, nil},
			{store.StateSucceeded, store.ErrWrongState},
			{store.StateDead, store.ErrWrongState},
			{store.StateCancelled, store.ErrWrongState},
		}
		for _, c := range cases {
			t.Run(stateName(c.state), func(t *testing.T) {
				st := newStore(t)
				before := makeJob(t, st, c.state, "pause")
				_, err := st.Control(t.Context(), before.ID, store.OpPause)
				require.ErrorIs(t, err, c.wantErr)
				requireUnchanged(t, st, before)
			})
		}
	})

	t.Run("PausedNeitherClaimedNorAnnounced", func(t *testing.T) {
		st := newStore(t)
		running := makeJob(t, st, store.StateRunning, "pause.quiet")
		control(t, st, running.ID, store.OpPause)
		rec := newRecorder()
		if n, ok := st.(store.Notifier); ok {
			t.Cleanup(n.Subscribe(rec.record))
		}
		got := finishOne(t, st, running, store.FinishParams{Outcome: store.OutcomeRelease})
		require.Equal(t, store.StatePaused, got.State)
		require.False(t, got.RunAt.After(storeNow(t, st)), "released with run_at = now: due, yet paused")

		res := claim(t, st, claimParams(10, longLease, "pause.quiet"))
		require.Empty(t, res.Jobs, "a paused job was claimed")
		require.True(t, res.NextRunAt.IsZero(), "NextRunAt counts a paused job: %s", res.NextRunAt)

		if _, ok := st.(store.Notifier); ok {
			// Notifications arrive in commit order: once the marker's
			// is in, a notification of the pause would have been too.
			marker := params(t, "pause.marker")
			insert(t, st, marker)
			rec.waitFor(t, "of the marker", notifiesRunAt("pause.marker", get(t, st, marker.ID).RunAt))
			for _, n := range rec.recorded() {
				require.NotEqual(t, "pause.quiet", n.Kind, "a paused job was announced as claimable: %+v", n)
			}
		}

		control(t, st, running.ID, store.OpResume)
		again := claimOnly(t, st, "pause.quiet", running.ID, longLease)
		require.Equal(t, 1, again.Attempt, "the released attempt was given back")
	})
}
