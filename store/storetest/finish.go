package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFinish checks Finish: each outcome, recorded errors, cancel requests,
// fencing and validation.
func testFinish(t *testing.T, newStore NewStoreFunc) {
	t.Run("FinalOutcomes", func(t *testing.T) {
		cases := []struct {
			outcome    store.Outcome
			errText    string
			wantState  store.State
			wantErrors []string
		}{
			{store.OutcomeSucceeded, "", store.StateSucceeded, nil},
			{store.OutcomeDead, "permanent failure", store.StateDead, []string{"permanent failure"}},
			{store.OutcomeCancelled, "context canceled", store.StateCancelled, []string{"context canceled"}},
		}
		for _, c := range cases {
			t.Run(c.outcome.String(), func(t *testing.T) {
				st := newStore(t)
				running := makeJob(t, st, store.StateRunning, "finish")
				before := storeNow(t, st)
				got := finishOne(t, st, running, store.FinishParams{Outcome: c.outcome, Error: c.errText})
				after := storeNow(t, st)

				require.Equal(t, c.wantState, got.State)
				require.Equal(t, 1, got.Attempt)
				require.Equal(t, owner, got.Owner, "Owner names the node that last held the job")
				requireLeaseCleared(t, got)
				requireBetween(t, before, after, got.FinishedAt, "FinishedAt")
				requireErrors(t, got, c.wantErrors, []int{1, 1, 1}[:len(c.wantErrors)])
			})
		}
	})

	t.Run("LiveOutcomes", func(t *testing.T) {
		cases := []struct {
			name        string
			outcome     store.Outcome
			delay       time.Duration
			errText     string
			wantState   store.State
			wantAttempt int
			wantErrors  []string
		}{
			{"RetryDelayed", store.OutcomeRetry, 10 * time.Minute, "boom", store.StateRetrying, 1, []string{"boom"}},
			{"RetryNow", store.OutcomeRetry, 0, "boom", store.StateRetrying, 1, []string{"boom"}},
			{"Snooze", store.OutcomeSnooze, 7 * time.Minute, "", store.StateScheduled, 0, nil},
			{"SnoozeZero", store.OutcomeSnooze, 0, "", store.StateScheduled, 0, nil},
			{"Release", store.OutcomeRelease, 0, "", store.StateScheduled, 0, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				running := makeJob(t, st, store.StateRunning, "finish")
				before := storeNow(t, st)
				got := finishOne(t, st, running, store.FinishParams{Outcome: c.outcome, Delay: c.delay, Error: c.errText})
				after := storeNow(t, st)

				require.Equal(t, c.wantState, got.State)
				require.Equal(t, c.wantAttempt, got.Attempt)
				require.Equal(t, owner, got.Owner)
				requireLeaseCleared(t, got)
				require.True(t, got.FinishedAt.IsZero(), "FinishedAt set on a live job")
				require.False(t, got.CancelRequested)
				requireBetween(t, before.Add(c.delay), after.Add(c.delay), got.RunAt, "RunAt = store now + Delay")
				requireErrors(t, got, c.wantErrors, []int{1, 1, 1}[:len(c.wantErrors)])
			})
		}
	})

	t.Run("ErrorsRecordAttempts", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "finish", withMaxAttempts(3))
		steps := []store.FinishParams{
			{Outcome: store.OutcomeRetry, Error: "e1"},
			{Outcome: store.OutcomeSnooze},
			{Outcome: store.OutcomeRelease},
			{Outcome: store.OutcomeRetry, Error: "e2"},
			{Outcome: store.OutcomeDead, Error: "e3"},
		}
		var started []time.Time // the claims of the attempts that failed
		for _, p := range steps {
			j := claimOnly(t, st, "finish", id, longLease)
			if p.Error != "" {
				started = append(started, j.AttemptedAt)
			}
			finishOne(t, st, j, p)
		}
		got := get(t, st, id)
		require.Equal(t, store.StateDead, got.State)
		require.Equal(t, 3, got.Attempt)
		requireErrors(t, got, []string{"e1", "e2", "e3"}, []int{1, 2, 3})
		for i := 1; i < len(got.Errors); i++ {
			require.False(t, got.Errors[i].At.Before(got.Errors[i-1].At), "errors oldest first")
		}
		for i, e := range got.Errors {
			require.Equal(t, owner, e.Node, "error %d names the attempt's node", i)
			requireTimeNear(t, started[i], e.StartedAt, storedTolerance)
			require.False(t, e.At.Before(e.StartedAt), "error %d recorded before its attempt started", i)
		}
	})

	t.Run("SnoozesLeaveATrace", func(t *testing.T) {
		// A snooze gives its attempt back and records no error: Snoozes
		// and SnoozedAt are its trace (issue 40), kept to the job's end.
		st := newStore(t)
		id := insertOne(t, st, "finish", withMaxAttempts(3))
		fresh := get(t, st, id)
		require.Zero(t, fresh.Snoozes)
		require.True(t, fresh.SnoozedAt.IsZero())
		steps := []struct {
			p       store.FinishParams
			snoozes int
		}{
			{store.FinishParams{Outcome: store.OutcomeSnooze}, 1},
			{store.FinishParams{Outcome: store.OutcomeRetry, Error: "e1"}, 1},
			{store.FinishParams{Outcome: store.OutcomeSnooze, Delay: time.Millisecond}, 2},
			{store.FinishParams{Outcome: store.OutcomeRelease}, 2},
			{store.FinishParams{Outcome: store.OutcomeSucceeded}, 2},
		}
		var last time.Time
		for i, step := range steps {
			if i > 0 {
				waitUntilStoreTime(t, st, get(t, st, id).RunAt)
			}
			j := claimOnly(t, st, "finish", id, longLease)
			before := storeNow(t, st)
			finishOne(t, st, j, step.p)
			got := get(t, st, id)
			require.Equal(t, step.snoozes, got.Snoozes, "after %s", step.p.Outcome)
			if step.p.Outcome == store.OutcomeSnooze {
				require.False(t, got.SnoozedAt.Before(before.Add(-clockTolerance)), "snoozed at %s, before the snooze (%s)", got.SnoozedAt, before)
				require.False(t, got.SnoozedAt.IsZero())
				require.False(t, got.SnoozedAt.Before(last), "the last snooze's time")
				last = got.SnoozedAt
			}
			requireTimeNear(t, last, got.SnoozedAt, storedTolerance)
		}
		got := get(t, st, id)
		require.Equal(t, store.StateSucceeded, got.State)
		require.Equal(t, 2, got.Attempt, "the retry and the success: snoozes and the release gave theirs back")
	})

	t.Run("CancelRequested", func(t *testing.T) {
		cases := []struct {
			outcome   store.Outcome
			wantState store.State
		}{
			{store.OutcomeRetry, store.StateCancelled},
			{store.OutcomeSnooze, store.StateCancelled},
			{store.OutcomeRelease, store.StateCancelled},
			{store.OutcomeCancelled, store.StateCancelled},
			{store.OutcomeSucceeded, store.StateSucceeded},
			{store.OutcomeDead, store.StateDead},
		}
		for _, c := range cases {
			t.Run(c.outcome.String(), func(t *testing.T) {
				st := newStore(t)
				running := makeJob(t, st, store.StateRunning, "finish")
				requested := control(t, st, running.ID, store.OpCancel)
				require.Equal(t, store.StateRunning, requested.State)
				require.True(t, requested.CancelRequested)

				got := finishOne(t, st, running, store.FinishParams{Outcome: c.outcome, Delay: time.Minute, Error: "stopped"})
				require.Equal(t, c.wantState, got.State)
				require.False(t, got.FinishedAt.IsZero(), "FinishedAt on a final state")
				requireLeaseCleared(t, got)
				require.Empty(t, claim(t, st, claimParams(10, longLease, "finish")).Jobs)
			})
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		outcomes := []store.Outcome{
			store.OutcomeSucceeded, store.OutcomeRetry, store.OutcomeDead,
			store.OutcomeSnooze, store.OutcomeRelease, store.OutcomeCancelled,
		}

		t.Run("StaleTokenAfterRescue", func(t *testing.T) {
			st := newStore(t)
			stale, current := rescuedAndReclaimed(t, st, "finish")
			before := get(t, st, current.ID)
			for _, o := range outcomes {
				t.Run(o.String(), func(t *testing.T) {
					ok := finish(t, st, store.FinishParams{Lease: lease(stale), Outcome: o, Error: "zombie"})
					require.Equal(t, []bool{false}, ok)
					requireUnchanged(t, st, before)
				})
			}
			// The current holder still finishes normally.
			got := finishOne(t, st, current, store.FinishParams{Outcome: store.OutcomeSucceeded})
			require.Equal(t, store.StateSucceeded, got.State)
		})

		t.Run("WrongToken", func(t *testing.T) {
			st := newStore(t)
			running := makeJob(t, st, store.StateRunning, "finish")
			for _, o := range outcomes {
				t.Run(o.String(), func(t *testing.T) {
					ok := finish(t, st, store.FinishParams{Lease: store.Lease{ID: running.ID, Token: newID(t)}, Outcome: o})
					require.Equal(t, []bool{false}, ok)
					requireUnchanged(t, st, running)
				})
			}
		})

		// A job that is not running has no token; a zero token must not
		// match it.
		for _, state := range []store.State{
			store.StateScheduled, store.StateRetrying, store.StatePaused,
			store.StateSucceeded, store.StateDead, store.StateCancelled,
		} {
			t.Run("NilTokenWhen"+stateName(state), func(t *testing.T) {
				st := newStore(t)
				j := makeJob(t, st, state, "finish")
				for _, o := range outcomes {
					ok := finish(t, st, store.FinishParams{Lease: store.Lease{ID: j.ID}, Outcome: o, Error: "zombie"})
					require.Equal(t, []bool{false}, ok, "%s", o)
					requireUnchanged(t, st, j)
				}
			})
		}

		t.Run("ExpiredButNotRescued", func(t *testing.T) {
			// An expired lease is still held until RescueExpired takes it.
			st := newStore(t)
			id := insertOne(t, st, "finish")
			j := claimOnly(t, st, "finish", id, shortLease)
			waitUntilStoreTime(t, st, j.LeaseExpiresAt)
			got := finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeSucceeded})
			require.Equal(t, store.StateSucceeded, got.State)
			rescue(t, st, 10, 0)
		})

		t.Run("UnknownJob", func(t *testing.T) {
			st := newStore(t)
			ok := finish(t, st, store.FinishParams{Lease: store.Lease{ID: newID(t), Token: newID(t)}, Outcome: store.OutcomeSucceeded})
			require.Equal(t, []bool{false}, ok)
		})

		t.Run("AlreadyFinished", func(t *testing.T) {
			st := newStore(t)
			running := makeJob(t, st, store.StateRunning, "finish")
			done := finishOne(t, st, running, store.FinishParams{Outcome: store.OutcomeRetry, Error: "first"})
			for _, o := range outcomes {
				t.Run(o.String(), func(t *testing.T) {
					ok := finish(t, st, store.FinishParams{Lease: lease(running), Outcome: o, Error: "again"})
					require.Equal(t, []bool{false}, ok)
					requireUnchanged(t, st, done)
				})
			}
		})

		t.Run("SameJobStaleAndCurrent", func(t *testing.T) {
			// One call carrying a zombie's outcome and the current
			// holder's for the same job: only the current one applies,
			// whatever their order.
			cases := []struct {
				name  string
				order func(zombie, holder store.FinishParams) []store.FinishParams
				want  []bool
			}{
				{"StaleFirst", func(z, h store.FinishParams) []store.FinishParams { return []store.FinishParams{z, h} }, []bool{false, true}},
				{"CurrentFirst", func(z, h store.FinishParams) []store.FinishParams { return []store.FinishParams{h, z} }, []bool{true, false}},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					st := newStore(t)
					stale, current := rescuedAndReclaimed(t, st, "finish.dup")
					zombie := store.FinishParams{Lease: lease(stale), Outcome: store.OutcomeDead, Error: "zombie"}
					holder := store.FinishParams{Lease: lease(current), Outcome: store.OutcomeSucceeded}
					require.Equal(t, c.want, finish(t, st, c.order(zombie, holder)...))
					got := get(t, st, current.ID)
					require.Equal(t, store.StateSucceeded, got.State)
					require.Len(t, got.Errors, 1, "only the rescue's error: the zombie's was not recorded")
				})
			}
		})

		t.Run("SameLeaseTwice", func(t *testing.T) {
			st := newStore(t)
			running := makeJob(t, st, store.StateRunning, "finish.twice")
			ok := finish(t, st,
				store.FinishParams{Lease: lease(running), Outcome: store.OutcomeDead, Error: "first"},
				store.FinishParams{Lease: lease(running), Outcome: store.OutcomeSucceeded},
			)
			require.Equal(t, []bool{true, false}, ok, "a lease listed twice is applied once, for its first row")
			got := get(t, st, running.ID)
			require.Equal(t, store.StateDead, got.State)
			requireErrors(t, got, []string{"first"}, []int{1})
		})

		t.Run("MixedBatch", func(t *testing.T) {
			st := newStore(t)
			stale, current := rescuedAndReclaimed(t, st, "finish.stale")
			a := makeJob(t, st, store.StateRunning, "finish.a")
			b := makeJob(t, st, store.StateRunning, "finish.b")
			staleBefore := get(t, st, current.ID)
			ok := finish(t, st,
				store.FinishParams{Lease: lease(a), Outcome: store.OutcomeSucceeded},
				store.FinishParams{Lease: lease(stale), Outcome: store.OutcomeDead, Error: "zombie"},
				store.FinishParams{Lease: store.Lease{ID: newID(t), Token: newID(t)}, Outcome: store.OutcomeSucceeded},
				store.FinishParams{Lease: lease(b), Outcome: store.OutcomeRetry, Error: "boom"},
			)
			require.Equal(t, []bool{true, false, false, true}, ok)
			require.Equal(t, store.StateSucceeded, get(t, st, a.ID).State)
			require.Equal(t, store.StateRetrying, get(t, st, b.ID).State)
			requireUnchanged(t, st, staleBefore)
		})
	})

	t.Run("InvalidParams", func(t *testing.T) {
		cases := []struct {
			name string
			p    func(j *store.JobRecord) store.FinishParams
		}{
			{"NegativeRetryDelay", func(j *store.JobRecord) store.FinishParams {
				return store.FinishParams{Lease: lease(j), Outcome: store.OutcomeRetry, Delay: -time.Second, Error: "e"}
			}},
			{"NegativeSnoozeDelay", func(j *store.JobRecord) store.FinishParams {
				return store.FinishParams{Lease: lease(j), Outcome: store.OutcomeSnooze, Delay: -time.Second}
			}},
			{"UnknownOutcome", func(j *store.JobRecord) store.FinishParams {
				return store.FinishParams{Lease: lease(j), Outcome: store.Outcome(99)}
			}},
			{"ZeroOutcome", func(j *store.JobRecord) store.FinishParams {
				return store.FinishParams{Lease: lease(j)}
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				valid := makeJob(t, st, store.StateRunning, "finish.valid")
				bad := makeJob(t, st, store.StateRunning, "finish.bad")
				_, err := st.Finish(t.Context(), []store.FinishParams{
					{Lease: lease(valid), Outcome: store.OutcomeSucceeded},
					c.p(bad),
				})
				require.ErrorIs(t, err, store.ErrInvalidParams)
				requireUnchanged(t, st, valid)
				requireUnchanged(t, st, bad)
			})
		}
	})
}

// requireErrors requires that j recorded errors with the given texts and
// attempt numbers, oldest first, each with a time.
func requireErrors(t *testing.T, j *store.JobRecord, texts []string, attempts []int) {
	t.Helper()
	require.Len(t, j.Errors, len(texts), "errors: %+v", j.Errors)
	for i, e := range j.Errors {
		require.Equal(t, texts[i], e.Error, "error %d", i)
		require.Equal(t, attempts[i], e.Attempt, "attempt of error %d", i)
		require.False(t, e.At.IsZero(), "time of error %d", i)
	}
}

// rescuedAndReclaimed makes a job of kind whose first lease expired and was
// rescued, then claims it again. It returns the first (stale) and the
// current claim.
func rescuedAndReclaimed(t *testing.T, st store.Store, kind string) (stale, current *store.JobRecord) {
	t.Helper()
	id := insertOne(t, st, kind, withMaxAttempts(5))
	stale = claimOnly(t, st, kind, id, shortLease)
	waitUntilStoreTime(t, st, stale.LeaseExpiresAt)
	rescued, err := st.RescueExpired(t.Context(), 100)
	require.NoError(t, err)
	require.Len(t, rescued, 1)
	current = claimOnly(t, st, kind, id, longLease)
	require.NotEqual(t, stale.LeaseToken, current.LeaseToken)
	require.NotEqual(t, uuid.Nil, current.LeaseToken)
	require.Equal(t, 2, current.Attempt)
	return stale, current
}
