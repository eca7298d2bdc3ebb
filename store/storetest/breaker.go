package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFlowBreaker checks circuit breakers: opening after failures in a
// row and on a failure ratio, no start while open (NextRunAt is the end
// of the cool-down), one probe at a time in half-open, a failed probe
// doubling the cool-down, a succeeded one closing it, a lost probe
// replaced, outcomes that do not count, and opening and closing by hand.
func testFlowBreaker(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	const coolDown = 200 * time.Millisecond
	byCount := store.BreakerConfig{Failures: 3, CoolDown: coolDown, MaxCoolDown: 3 * coolDown}

	t.Run("Cycle", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fb", Breaker: byCount})
		insertN(t, st, "fb", 20)
		jobs := claim(t, st, claimParams(5, longLease, "fb")).Jobs
		require.Len(t, jobs, 5)

		// A success between failures resets the count.
		require.Empty(t, finishFlow(t, st, outcome(jobs[0], store.OutcomeRetry), outcome(jobs[1], store.OutcomeDead),
			outcome(jobs[2], store.OutcomeSucceeded), outcome(jobs[3], store.OutcomeRetry)))
		require.Equal(t, 1, flowOf(t, st, "fb").Breaker.Failures)
		// Snoozes and hand-backs do not count.
		ns := outcome(jobs[4], store.OutcomeSnooze)
		require.Empty(t, finishFlow(t, st, ns))

		jobs = claim(t, st, claimParams(2, longLease, "fb")).Jobs
		require.Len(t, jobs, 2)
		before := storeNow(t, st)
		tr := finishFlow(t, st, outcome(jobs[0], store.OutcomeRetry), outcome(jobs[1], store.OutcomeRetry))
		after := storeNow(t, st)
		require.Len(t, tr, 1, "the third failure in a row opens it, once")
		require.Equal(t, "fb", tr[0].Kind)
		require.Equal(t, store.BreakerClosed, tr[0].From)
		require.Equal(t, store.BreakerOpen, tr[0].To)
		require.Equal(t, coolDown, tr[0].CoolDown)
		require.NotEmpty(t, tr[0].Reason)
		requireBetween(t, before, after, tr[0].At, "transition time")
		f := flowOf(t, st, "fb")
		require.Equal(t, store.BreakerOpen, f.Breaker.State)
		requireTimeNear(t, tr[0].At.Add(coolDown), f.Breaker.ProbeAt, storedTolerance)

		// Open: nothing starts, jobs wait as they are, NextRunAt is the probe.
		res := claim(t, st, claimParams(100, longLease, "fb"))
		if res.Now.Before(f.Breaker.ProbeAt) {
			require.Empty(t, res.Jobs)
			requireTimeNear(t, f.Breaker.ProbeAt, res.NextRunAt, storedTolerance, "NextRunAt is the cool-down's end")
		}
		waitUntilStoreTime(t, st, f.Breaker.ProbeAt)

		// Half-open: one probe.
		res = claim(t, st, claimParams(100, longLease, "fb"))
		require.Len(t, res.Jobs, 1, "one probe")
		require.Len(t, res.Breakers, 1)
		require.Equal(t, store.BreakerOpen, res.Breakers[0].From)
		require.Equal(t, store.BreakerHalfOpen, res.Breakers[0].To)
		probe := res.Jobs[0]
		res = claim(t, st, claimParams(100, longLease, "fb"))
		require.Empty(t, res.Jobs, "the probe runs alone")
		require.True(t, res.NextRunAt.IsZero(), "held until the probe ends: %s", res.NextRunAt)

		// A failed probe reopens it for twice as long.
		tr = finishFlow(t, st, outcome(probe, store.OutcomeRetry))
		require.Len(t, tr, 1)
		require.Equal(t, store.BreakerHalfOpen, tr[0].From)
		require.Equal(t, store.BreakerOpen, tr[0].To)
		require.Equal(t, 2*coolDown, tr[0].CoolDown)
		f = flowOf(t, st, "fb")
		waitUntilStoreTime(t, st, f.Breaker.ProbeAt)

		// A succeeded probe closes it; everything starts again.
		probe = claim(t, st, claimParams(100, longLease, "fb")).Jobs[0]
		tr = finishFlow(t, st, outcome(probe, store.OutcomeSucceeded))
		require.Len(t, tr, 1)
		require.Equal(t, store.BreakerClosed, tr[0].To)
		require.Equal(t, store.BreakerClosed, flowOf(t, st, "fb").Breaker.State)
		// 20 jobs, of which one dead and two succeeded; the failed and
		// snoozed ones are due again at once (no delay).
		require.Len(t, claim(t, st, claimParams(100, longLease, "fb")).Jobs, 17, "all the rest")
	})
	t.Run("ThresholdOneAtATime", func(t *testing.T) {
		// Claims of one job each, every attempt failing: the claim after
		// the call that recorded the third failure starts nothing, with
		// the outcomes written by FinishFlow or by the plain Finish, and
		// with the jobs retried at once (due again) or held back.
		tests := []struct {
			name  string
			flow  bool
			delay time.Duration
		}{
			{"FinishFlow", true, 0},
			{"Finish", false, 0},
			{"FinishRetryLater", false, time.Hour},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				st := newStore(t)
				setFlows(t, st, store.FlowConfig{Kind: "fb", Breaker: store.BreakerConfig{Failures: 3, CoolDown: time.Hour, MaxCoolDown: time.Hour}})
				insertN(t, st, "fb", 10)
				for i := range 3 {
					res := claim(t, st, claimParams(1, longLease, "fb"))
					require.Len(t, res.Jobs, 1, "attempt %d starts: %d failure(s) recorded", i+1, i)
					p := outcome(res.Jobs[0], store.OutcomeRetry)
					p.Delay = tt.delay
					if tt.flow {
						finishFlow(t, st, p)
					} else {
						require.Equal(t, []bool{true}, finish(t, st, p))
					}
				}
				f := flowOf(t, st, "fb")
				require.Equal(t, store.BreakerOpen, f.Breaker.State, "3 failures in a row recorded")
				res := claim(t, st, claimParams(10, longLease, "fb"))
				require.Empty(t, res.Jobs, "no attempt starts once the threshold is reached")
				requireTimeNear(t, f.Breaker.ProbeAt, res.NextRunAt, storedTolerance, "NextRunAt is the cool-down's end")
			})
		}
	})
	t.Run("CoolDownCapped", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fb", Breaker: store.BreakerConfig{Failures: 1, CoolDown: 50 * time.Millisecond, MaxCoolDown: 120 * time.Millisecond}})
		insertN(t, st, "fb", 5)
		j := claim(t, st, claimParams(1, longLease, "fb")).Jobs[0]
		want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 120 * time.Millisecond, 120 * time.Millisecond}
		for i, d := range want {
			tr := finishFlow(t, st, outcome(j, store.OutcomeRetry))
			require.Len(t, tr, 1)
			require.Equal(t, d, tr[0].CoolDown, "opening %d", i)
			if i == len(want)-1 {
				break
			}
			waitUntilStoreTime(t, st, flowOf(t, st, "fb").Breaker.ProbeAt)
			j = claim(t, st, claimParams(1, longLease, "fb")).Jobs[0]
		}
	})
	t.Run("Ratio", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fb", Breaker: store.BreakerConfig{
			FailureRatio: 0.5, Window: time.Hour, MinAttempts: 4, CoolDown: time.Hour, MaxCoolDown: time.Hour}})
		insertN(t, st, "fb", 10)
		jobs := claim(t, st, claimParams(10, longLease, "fb")).Jobs
		// F S F: 2 of 3 failed, fewer than MinAttempts.
		require.Empty(t, finishFlow(t, st, outcome(jobs[0], store.OutcomeRetry), outcome(jobs[1], store.OutcomeSucceeded),
			outcome(jobs[2], store.OutcomeRetry)))
		f := flowOf(t, st, "fb")
		require.Equal(t, 3, f.Breaker.WindowAttempts)
		require.Equal(t, 2, f.Breaker.WindowFailures)
		// S: 2 of 4 = 0.5.
		tr := finishFlow(t, st, outcome(jobs[3], store.OutcomeSucceeded), outcome(jobs[4], store.OutcomeRetry))
		require.Len(t, tr, 1, "opened at the fourth attempt; the fifth, while open, changes nothing")
		require.Equal(t, store.BreakerOpen, tr[0].To)
	})
	t.Run("LostProbeReplaced", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fb", Breaker: store.BreakerConfig{Failures: 1, CoolDown: 50 * time.Millisecond, MaxCoolDown: time.Second}})
		insertN(t, st, "fb", 5)
		j := claim(t, st, claimParams(1, longLease, "fb")).Jobs[0]
		finishFlow(t, st, outcome(j, store.OutcomeRetry))
		waitUntilStoreTime(t, st, flowOf(t, st, "fb").Breaker.ProbeAt)
		probe := claim(t, st, claimParams(10, shortLease, "fb")).Jobs
		require.Len(t, probe, 1)
		waitUntilStoreTime(t, st, probe[0].LeaseExpiresAt)
		rescued, err := st.RescueExpired(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, rescued, 1)
		require.Equal(t, store.BreakerHalfOpen, flowOf(t, st, "fb").Breaker.State, "a rescue is no verdict")
		res := claim(t, st, claimParams(10, longLease, "fb"))
		require.Len(t, res.Jobs, 1, "another probe")
		require.Empty(t, res.Breakers, "still half-open: no transition")
		// A hand-back is no verdict either.
		finishFlow(t, st, outcome(res.Jobs[0], store.OutcomeRelease))
		require.Len(t, claim(t, st, claimParams(10, longLease, "fb")).Jobs, 1)
	})
	t.Run("ByHand", func(t *testing.T) {
		st := newStore(t)
		fs := as[store.FlowStore](t, st)
		setFlows(t, st, store.FlowConfig{Kind: "fb", Breaker: store.BreakerConfig{Failures: 1, CoolDown: time.Hour, MaxCoolDown: time.Hour}})
		insertN(t, st, "fb", 3)
		n := as[store.Notifier](t, st)
		rec := newRecorder()
		unsubscribe := n.Subscribe(rec.record)
		defer unsubscribe()

		res, err := fs.SetBreaker(t.Context(), "fb", true)
		require.NoError(t, err)
		require.NotNil(t, res.Transition)
		require.Equal(t, store.BreakerOpen, res.Transition.To)
		require.Equal(t, store.BreakerOpen, res.State.Breaker.State)
		require.Empty(t, claim(t, st, claimParams(10, longLease, "fb")).Jobs)
		res, err = fs.SetBreaker(t.Context(), "fb", true)
		require.NoError(t, err)
		require.Nil(t, res.Transition, "already open")

		at := storeNow(t, st)
		res, err = fs.SetBreaker(t.Context(), "fb", false)
		require.NoError(t, err)
		require.Equal(t, store.BreakerClosed, res.Transition.To)
		rec.waitFor(t, "for the closed breaker", notifiesRunAt("fb", at))
		require.Len(t, claim(t, st, claimParams(10, longLease, "fb")).Jobs, 3)

		_, err = fs.SetBreaker(t.Context(), "fb.none", true)
		require.ErrorIs(t, err, store.ErrNotFound, "a kind without a breaker")
		_, err = fs.SetBreaker(t.Context(), "", true)
		require.ErrorIs(t, err, store.ErrInvalidParams)
	})
	t.Run("KeptAcrossDeclarations", func(t *testing.T) {
		st := newStore(t)
		fs := as[store.FlowStore](t, st)
		cfg := store.FlowConfig{Kind: "fb", Breaker: store.BreakerConfig{Failures: 1, CoolDown: time.Hour, MaxCoolDown: time.Hour}}
		setFlows(t, st, cfg)
		_, err := fs.SetBreaker(t.Context(), "fb", true)
		require.NoError(t, err)
		cfg.Concurrency = 10
		setFlows(t, st, cfg) // a host restarting with new settings
		require.Equal(t, store.BreakerOpen, flowOf(t, st, "fb").Breaker.State, "a restart does not close an open breaker")
		cfg.Breaker = store.BreakerConfig{}
		setFlows(t, st, cfg)
		require.Equal(t, store.BreakerClosed, flowOf(t, st, "fb").Breaker.State, "without a breaker, nothing is open")
	})
}
