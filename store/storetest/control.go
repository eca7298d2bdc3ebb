package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// controlCheck checks a job after an allowed Control: before is the job as
// read before, after as returned by Control, and [from, to] brackets the
// store clock during the call.
type controlCheck func(t *testing.T, before, after *store.JobRecord, from, to time.Time)

// unchanged checks a "no change" transition.
func unchanged(t *testing.T, before, after *store.JobRecord, _, _ time.Time) {
	t.Helper()
	requireSameRecord(t, before, after, "a no-change operation changed the job")
}

// becomes checks that the job moved to state and that nothing else changed
// except what also is checked by more.
func becomes(state store.State, more ...func(t *testing.T, before, after *store.JobRecord, from, to time.Time)) controlCheck {
	return func(t *testing.T, before, after *store.JobRecord, from, to time.Time) {
		t.Helper()
		require.Equal(t, state, after.State)
		require.Equal(t, before.Kind, after.Kind)
		require.Equal(t, string(before.Payload), string(after.Payload), "payload kept byte for byte")
		requireTimeNear(t, before.ScheduledAt, after.ScheduledAt, 0, "ScheduledAt never changes")
		require.Equal(t, before.Fence, after.Fence, "only a claim moves the fence")
		require.False(t, after.PauseRequested, "a job that is not running has no pause request")
		require.Equal(t, before.Priority, after.Priority)
		require.Equal(t, before.MaxAttempts, after.MaxAttempts)
		require.Equal(t, before.UniqueKey, after.UniqueKey)
		requireTimeNear(t, before.CreatedAt, after.CreatedAt, storedTolerance)
		requireSameErrors(t, before.Errors, after.Errors)
		for _, m := range more {
			m(t, before, after, from, to)
		}
	}
}

// Checks combined with becomes.

func runAtKept(t *testing.T, before, after *store.JobRecord, _, _ time.Time) {
	t.Helper()
	requireTimeNear(t, before.RunAt, after.RunAt, storedTolerance, "run_at kept")
}

func runAtNow(t *testing.T, _, after *store.JobRecord, from, to time.Time) {
	t.Helper()
	requireBetween(t, from, to, after.RunAt, "run_at = store now")
}

func attemptKept(t *testing.T, before, after *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.Equal(t, before.Attempt, after.Attempt)
}

// attemptKeptOneMore: the attempt number is kept and at least one more
// attempt is allowed.
func attemptKeptOneMore(t *testing.T, before, after *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.Equal(t, before.Attempt, after.Attempt)
	require.Equal(t, max(before.MaxAttempts, before.Attempt+1), after.MaxAttempts)
}

func finishedNow(t *testing.T, _, after *store.JobRecord, from, to time.Time) {
	t.Helper()
	requireBetween(t, from, to, after.FinishedAt, "FinishedAt")
	requireLeaseCleared(t, after)
}

func notFinished(t *testing.T, _, after *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.True(t, after.FinishedAt.IsZero(), "FinishedAt %s on a live job", after.FinishedAt)
	requireLeaseCleared(t, after)
	require.False(t, after.CancelRequested)
}

func cancelRequested(t *testing.T, before, after *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.True(t, after.CancelRequested)
	after2 := *after
	after2.CancelRequested = false
	requireSameRecord(t, before, &after2, "cancel of a running job only requests it")
}

func pauseRequested(t *testing.T, before, after *store.JobRecord, _, _ time.Time) {
	t.Helper()
	require.True(t, after.PauseRequested)
	after2 := *after
	after2.PauseRequested = false
	requireSameRecord(t, before, &after2, "pause of a running job only requests it")
}

// testControl checks every Control transition, allowed and refused.
func testControl(t *testing.T, newStore NewStoreFunc) {
	allowed := []struct {
		from  store.State
		op    store.ControlOp
		check controlCheck
	}{
		// OpCancel
		{store.StateScheduled, store.OpCancel, becomes(store.StateCancelled, finishedNow, attemptKept, runAtKept)},
		{store.StateRetrying, store.OpCancel, becomes(store.StateCancelled, finishedNow, attemptKept, runAtKept)},
		{store.StatePaused, store.OpCancel, becomes(store.StateCancelled, finishedNow, attemptKept, runAtKept)},
		{store.StateRunning, store.OpCancel, cancelRequested},
		{store.StateCancelled, store.OpCancel, unchanged},
		// OpPause
		{store.StateScheduled, store.OpPause, becomes(store.StatePaused, notFinished, attemptKept, runAtKept)},
		{store.StateRetrying, store.OpPause, becomes(store.StatePaused, notFinished, attemptKept, runAtKept)},
		{store.StatePaused, store.OpPause, unchanged},
		{store.StateRunning, store.OpPause, pauseRequested},
		// OpResume
		{store.StatePaused, store.OpResume, becomes(store.StateScheduled, notFinished, attemptKept, runAtKept)},
		{store.StateScheduled, store.OpResume, unchanged},
		{store.StateRetrying, store.OpResume, unchanged},
		{store.StateRunning, store.OpResume, unchanged},
		// OpRunNow
		{store.StateScheduled, store.OpRunNow, becomes(store.StateScheduled, notFinished, attemptKept, runAtNow)},
		{store.StateRetrying, store.OpRunNow, becomes(store.StateScheduled, notFinished, attemptKept, runAtNow)},
		{store.StatePaused, store.OpRunNow, becomes(store.StateScheduled, notFinished, attemptKept, runAtNow)},
		{store.StateDead, store.OpRunNow, becomes(store.StateScheduled, notFinished, attemptKeptOneMore, runAtNow)},
		{store.StateCancelled, store.OpRunNow, becomes(store.StateScheduled, notFinished, attemptKeptOneMore, runAtNow)},
	}
	for _, c := range allowed {
		t.Run(c.op.String()+"/"+stateName(c.from), func(t *testing.T) {
			st := newStore(t)
			before := makeJob(t, st, c.from, "control")
			from := storeNow(t, st)
			after := control(t, st, before.ID, c.op)
			to := storeNow(t, st)
			c.check(t, before, after, from, to)
			requireSameRecord(t, after, get(t, st, before.ID), "Control returned the job as it is afterwards")
		})
	}

	refused := []struct {
		from store.State
		op   store.ControlOp
	}{
		{store.StateSucceeded, store.OpCancel},
		{store.StateDead, store.OpCancel},
		{store.StateSucceeded, store.OpPause},
		{store.StateDead, store.OpPause},
		{store.StateCancelled, store.OpPause},
		{store.StateSucceeded, store.OpResume},
		{store.StateDead, store.OpResume},
		{store.StateCancelled, store.OpResume},
		{store.StateRunning, store.OpRunNow},
		{store.StateSucceeded, store.OpRunNow},
	}
	for _, c := range refused {
		t.Run(c.op.String()+"/"+stateName(c.from)+"Refused", func(t *testing.T) {
			st := newStore(t)
			before := makeJob(t, st, c.from, "control")
			_, err := st.Control(t.Context(), before.ID, c.op)
			require.ErrorIs(t, err, store.ErrWrongState)
			requireUnchanged(t, st, before)
		})
	}

	for _, op := range []store.ControlOp{store.OpCancel, store.OpPause, store.OpResume, store.OpRunNow} {
		t.Run(op.String()+"/NotFound", func(t *testing.T) {
			st := newStore(t)
			other := makeJob(t, st, store.StateScheduled, "control")
			_, err := st.Control(t.Context(), newID(t), op)
			require.ErrorIs(t, err, store.ErrNotFound)
			requireUnchanged(t, st, other)
		})
	}

	t.Run("CancelRacesClaim", func(t *testing.T) {
		// Each job is either cancelled before any claim took it, or claimed
		// and then asked to cancel; never both, never neither.
		st := newStore(t)
		ctx := ctxTimeout(t)
		const n = 200
		ps := make([]store.InsertParams, n)
		for i := range ps {
			ps[i] = params(t, "control.race")
		}
		ids := insert(t, st, ps...)

		claimed := map[uuid.UUID]bool{}
		var claimErr, cancelErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			for {
				res, err := st.Claim(ctx, claimParams(13, longLease, "control.race"))
				if err != nil {
					claimErr = err
					return
				}
				if len(res.Jobs) == 0 {
					return
				}
				for _, j := range res.Jobs {
					claimed[j.ID] = true
				}
			}
		})
		wg.Go(func() {
			<-start
			for _, id := range ids {
				if _, err := st.Control(ctx, id, store.OpCancel); err != nil {
					cancelErr = err
					return
				}
			}
		})
		close(start)
		wg.Wait()
		require.NoError(t, claimErr)
		require.NoError(t, cancelErr)

		wantState := map[bool]store.State{true: store.StateRunning, false: store.StateCancelled}
		for _, id := range ids {
			j := get(t, st, id)
			require.Equal(t, wantState[claimed[id]], j.State, "job %s", id)
			require.True(t, j.State == store.StateCancelled || j.CancelRequested, "claimed job %s lost its cancel request", id)
		}
	})

	t.Run("Sequences", func(t *testing.T) {
		t.Run("CancelRunningTwice", func(t *testing.T) {
			st := newStore(t)
			j := makeJob(t, st, store.StateRunning, "control")
			first := control(t, st, j.ID, store.OpCancel)
			second := control(t, st, j.ID, store.OpCancel)
			requireSameRecord(t, first, second, "a second cancel changes nothing")
		})
		t.Run("RunNowMakesDue", func(t *testing.T) {
			st := newStore(t)
			j := makeJob(t, st, store.StatePaused, "control")
			control(t, st, j.ID, store.OpRunNow)
			claimOnly(t, st, "control", j.ID, longLease)
		})
		t.Run("ResumeKeepsFutureRunAt", func(t *testing.T) {
			st := newStore(t)
			j := makeJob(t, st, store.StatePaused, "control")
			control(t, st, j.ID, store.OpResume)
			require.Empty(t, claim(t, st, claimParams(10, longLease, "control")).Jobs)
		})
		t.Run("ResumeDuePausedJob", func(t *testing.T) {
			st := newStore(t)
			id := insertOne(t, st, "control", withRunAt(storeNow(t, st).Add(-time.Minute)))
			control(t, st, id, store.OpPause)
			require.Empty(t, claim(t, st, claimParams(10, longLease, "control")).Jobs)
			control(t, st, id, store.OpResume)
			claimOnly(t, st, "control", id, longLease)
		})
		t.Run("RunNowDeadNumbersAttemptsOn", func(t *testing.T) {
			st := newStore(t)
			id := insertOne(t, st, "control", withMaxAttempts(1))
			j := claimOnly(t, st, "control", id, longLease)
			finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeDead, Error: "e1"})
			control(t, st, id, store.OpRunNow)
			again := claimOnly(t, st, "control", id, longLease)
			require.Equal(t, 2, again.Attempt, "the attempt after RunNow follows the last one")
			require.Equal(t, 2, again.MaxAttempts, "a job that used all its attempts gets one more")
			require.NotEqual(t, j.LeaseToken, again.LeaseToken)
			got := finishOne(t, st, again, store.FinishParams{Outcome: store.OutcomeDead, Error: "e2"})
			require.Len(t, got.Errors, 2, "errors are kept across RunNow")
			require.Equal(t, "e1", got.Errors[0].Error)
			require.Equal(t, "e2", got.Errors[1].Error)
		})
	})
}

// requireSameErrors requires equal attempt errors, times within tolerance.
func requireSameErrors(t *testing.T, want, got []store.AttemptError) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].Attempt, got[i].Attempt)
		require.Equal(t, want[i].Error, got[i].Error)
		require.Equal(t, want[i].Node, got[i].Node)
		requireTimeNear(t, want[i].At, got[i].At, storedTolerance)
		requireTimeNear(t, want[i].StartedAt, got[i].StartedAt, storedTolerance)
	}
}
