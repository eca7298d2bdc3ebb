package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestCompleteTxBreakerNoLock: CompleteTx of a kind with a circuit
// breaker, whose outcome changes the breaker, does not hold the kind's
// flows row for the life of the caller's transaction (issue 23, item 9):
// while that transaction stays open, a claim of the kind from another
// connection does not wait; once it commits, the next claim folds the
// verdict into the breaker. Before the fix the claim waited for the
// caller's commit.
func TestCompleteTxBreakerNoLock(t *testing.T) {
	tests := []struct {
		name    string
		breaker store.BreakerConfig
		failed  bool // CompleteTx writes a retry rather than a success
		// prepare claims the job to complete in a transaction and may
		// feed the breaker first.
		prepare func(t *testing.T, s *pgstore.Store, kind string) *store.JobRecord
		// claimWhileOpen is how many jobs the claim made while the
		// transaction is open takes.
		claimWhileOpen int
		check          func(t *testing.T, res *store.ClaimResult, f store.FlowState)
	}{
		{
			name:    "ratio",
			breaker: store.BreakerConfig{FailureRatio: 0.5, Window: time.Hour, MinAttempts: 100, CoolDown: time.Hour, MaxCoolDown: time.Hour},
			prepare: func(t *testing.T, s *pgstore.Store, kind string) *store.JobRecord {
				return claimKind(t, s, kind, 1)[0]
			},
			claimWhileOpen: 1,
			check: func(t *testing.T, _ *store.ClaimResult, f store.FlowState) {
				require.Equal(t, 1, f.Breaker.WindowAttempts, "the success counted in the window")
				require.Zero(t, f.Breaker.WindowFailures)
			},
		},
		{
			name:    "failures in a row reset",
			breaker: store.BreakerConfig{Failures: 3, CoolDown: time.Hour, MaxCoolDown: time.Hour},
			prepare: func(t *testing.T, s *pgstore.Store, kind string) *store.JobRecord {
				jobs := claimKind(t, s, kind, 2)
				res, err := s.FinishFlow(ctxT(t), []store.FinishParams{{Lease: leaseOf(jobs[0]), Outcome: store.OutcomeRetry, Error: "boom"}})
				require.NoError(t, err)
				require.Equal(t, []bool{true}, res.OK)
				return jobs[1]
			},
			claimWhileOpen: 1,
			check: func(t *testing.T, _ *store.ClaimResult, f store.FlowState) {
				require.Equal(t, store.BreakerClosed, f.Breaker.State)
				require.Zero(t, f.Breaker.Failures, "the success reset the failures in a row")
			},
		},
		{
			name:    "failure opens",
			breaker: store.BreakerConfig{Failures: 1, CoolDown: time.Hour, MaxCoolDown: time.Hour},
			failed:  true,
			prepare: func(t *testing.T, s *pgstore.Store, kind string) *store.JobRecord {
				return claimKind(t, s, kind, 1)[0]
			},
			claimWhileOpen: 1, // not committed: not yet a failure
			check: func(t *testing.T, res *store.ClaimResult, f store.FlowState) {
				require.Equal(t, store.BreakerOpen, f.Breaker.State, "the failure opened it")
				require.Empty(t, res.Jobs, "nothing starts once the committed failure is folded in")
				require.Len(t, res.Breakers, 1)
				require.Equal(t, store.BreakerOpen, res.Breakers[0].To)
			},
		},
		{
			name:    "probe",
			breaker: store.BreakerConfig{Failures: 1, CoolDown: 50 * time.Millisecond, MaxCoolDown: time.Hour},
			prepare: func(t *testing.T, s *pgstore.Store, kind string) *store.JobRecord {
				j := claimKind(t, s, kind, 1)[0]
				_, err := s.FinishFlow(ctxT(t), []store.FinishParams{{Lease: leaseOf(j), Outcome: store.OutcomeRetry, Error: "boom", Delay: time.Hour}})
				require.NoError(t, err)
				f := flowState(t, s, kind)
				require.Equal(t, store.BreakerOpen, f.Breaker.State)
				waitStoreTime(t, s, f.Breaker.ProbeAt)
				probe := claimKind(t, s, kind, 5)
				require.Len(t, probe, 1)
				return probe[0]
			},
			claimWhileOpen: 0, // the probe still runs for everyone else
			check: func(t *testing.T, res *store.ClaimResult, f store.FlowState) {
				require.Equal(t, store.BreakerClosed, f.Breaker.State, "the probe's success closed it")
				require.Len(t, res.Breakers, 1, "the claim that folded the verdict reports the transition")
				require.Equal(t, store.BreakerClosed, res.Breakers[0].To)
				require.Len(t, res.Jobs, 1)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, pool := newStorePool(t)
			ctx := ctxT(t)
			const kind = "cb.tx"
			require.NoError(t, s.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{{Kind: kind, Breaker: tt.breaker}}}))
			for range 4 {
				_, err := s.Insert(ctx, []store.InsertParams{job(kind)})
				require.NoError(t, err)
			}
			j := tt.prepare(t, s, kind)

			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			p := store.FinishParams{Lease: leaseOf(j), Outcome: store.OutcomeSucceeded}
			if tt.failed {
				p.Outcome, p.Error, p.Delay = store.OutcomeRetry, "boom", time.Hour
			}
			ok, err := s.CompleteTx(ctx, tx, p)
			require.NoError(t, err)
			require.True(t, ok)

			// A claim of the kind from another connection, while the
			// transaction stays open: it must return, not wait for a lock.
			type result struct {
				res *store.ClaimResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := s.Claim(ctx, &store.ClaimParams{Owner: "other", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}},
					Limit: 1, LeaseDuration: time.Hour})
				done <- result{res, err}
			}()
			got, blocked := claimOrLockWait(t, pool, done)
			if blocked {
				require.NoError(t, tx.Commit(ctx)) // lets the claim go
				<-done
				t.Fatal("a claim of the kind waited for the transaction that called CompleteTx")
			}
			require.NoError(t, got.err)
			require.Len(t, got.res.Jobs, tt.claimWhileOpen)

			require.NoError(t, tx.Commit(ctx))
			res, err := s.Claim(ctx, &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}},
				Limit: 1, LeaseDuration: time.Hour})
			require.NoError(t, err)
			tt.check(t, res, flowState(t, s, kind))
		})
	}
}

// claimOrLockWait waits until the claim sends its result on done
// (false), or until a backend of the test's database waits for a lock
// (true).
func claimOrLockWait[T any](t *testing.T, pool *pgxpool.Pool, done <-chan T) (T, bool) {
	t.Helper()
	ctx := ctxT(t)
	for {
		select {
		case r := <-done:
			return r, false
		default:
		}
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			var zero T
			return zero, true
		}
		select {
		case r := <-done:
			return r, false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// flowState returns the flow state of kind.
func flowState(t *testing.T, s *pgstore.Store, kind string) store.FlowState {
	t.Helper()
	flows, err := s.Flows(ctxT(t))
	require.NoError(t, err)
	for _, f := range flows {
		if f.Config.Kind == kind {
			return f
		}
	}
	t.Fatalf("no flow state of %q", kind)
	return store.FlowState{}
}

// waitStoreTime waits until the store's clock reaches at.
func waitStoreTime(t *testing.T, s *pgstore.Store, at time.Time) {
	t.Helper()
	for {
		now, err := s.Now(context.Background())
		require.NoError(t, err)
		if !now.Before(at) {
			return
		}
		time.Sleep(at.Sub(now) + time.Millisecond)
	}
}

// TestBreakerVerdictFoldedByFinish: a success committed through
// CompleteTx, recorded as a verdict, comes before a later failure written
// by Finish: the Finish folds it in first (the failures in a row start
// again from zero) and deletes it.
func TestBreakerVerdictFoldedByFinish(t *testing.T) {
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	const kind = "cb.fold"
	require.NoError(t, s.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{{Kind: kind,
		Breaker: store.BreakerConfig{Failures: 2, CoolDown: time.Hour, MaxCoolDown: time.Hour}}}}))
	for range 3 {
		_, err := s.Insert(ctx, []store.InsertParams{job(kind)})
		require.NoError(t, err)
	}
	jobs := claimKind(t, s, kind, 3)
	require.Len(t, jobs, 3)
	fail := func(j *store.JobRecord) []store.BreakerTransition {
		res, err := s.FinishFlow(ctx, []store.FinishParams{{Lease: leaseOf(j), Outcome: store.OutcomeRetry, Error: "boom", Delay: time.Hour}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.OK)
		return res.Breakers
	}
	require.Empty(t, fail(jobs[0]))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	ok, err := s.CompleteTx(ctx, tx, store.FinishParams{Lease: leaseOf(jobs[1]), Outcome: store.OutcomeSucceeded})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tx.Commit(ctx))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.flow_breaker_verdicts`).Scan(&n))
	require.Equal(t, 1, n, "the success waits as a verdict")

	require.Empty(t, fail(jobs[2]), "success, then failure: one failure in a row")
	f := flowState(t, s, kind)
	require.Equal(t, store.BreakerClosed, f.Breaker.State)
	require.Equal(t, 1, f.Breaker.Failures)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.flow_breaker_verdicts`).Scan(&n))
	require.Zero(t, n, "folded verdicts are deleted")
}

// breakerOpened signals when a Scheduler emits EventBreakerOpened.
type breakerOpened chan struct{}

func (o breakerOpened) Observe(e ax.Event) {
	if e.Kind == ax.EventBreakerOpened {
		select {
		case o <- struct{}{}:
		default:
		}
	}
}

// TestBreakerThresholdStopsNextStartPG is the runtime's check on
// PostgreSQL (issue 23, item 12): Failures: 3, one job at a time, a
// handler that always fails, outcomes gathered for 50 ms: exactly three
// attempts start before the breaker opens. Stop waits for the handlers,
// so the count read after it is final.
func TestBreakerThresholdStopsNextStartPG(t *testing.T) {
	st := newStore(t)
	opened := make(breakerOpened, 1)
	s, err := ax.New(ax.Config{Store: st, PollInterval: 50 * time.Millisecond, FlushInterval: 50 * time.Millisecond,
		Observers: []ax.Observer{opened}, Logger: zap.NewNop()})
	require.NoError(t, err)
	var started atomic.Int64
	require.NoError(t, s.Handle("cb.runtime", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		started.Add(1)
		return errors.New("down")
	}), ax.Concurrency(1), ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return 0 })),
		ax.CircuitBreaker(ax.BreakerConfig{Failures: 3, CoolDown: time.Hour})))
	require.NoError(t, s.Start(ctxT(t)))
	for range 10 {
		_, err := s.Schedule(ctxT(t), "cb.runtime", nil)
		require.NoError(t, err)
	}
	select {
	case <-opened:
	case <-ctxT(t).Done():
		t.Fatal("the breaker did not open")
	}
	require.NoError(t, s.Stop(ctxT(t)))
	require.EqualValues(t, 3, started.Load(), "attempts started with Failures: 3 and one job at a time")
}
