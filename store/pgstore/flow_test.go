package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// What the conformance suite cannot see of pgstore's flow control: the
// safety nets for hosts whose list of flow-controlled kinds is up to a
// second old, and the pending counter kept by a trigger through every
// state change.

// TestFlowSequenceGuard: a Store that does not yet know that a kind has
// sequences claims it the plain way; the trigger keeps that claim from
// starting jobs of a sequence out of order, while jobs outside sequences
// still start.
func TestFlowSequenceGuard(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := ctxT(t)
	producer, err := pgstore.New(ctx, pool)
	require.NoError(t, err)
	defer producer.Close()
	stale, err := pgstore.New(ctx, pool)
	require.NoError(t, err)
	defer stale.Close()
	require.Empty(t, claimKind(t, stale, "seq", 10)) // reads its list: no flow-controlled kind
	stale.HoldFlowCache()                            // and keeps it, however slow the machine

	var ps []store.InsertParams
	for range 3 {
		p := job("seq")
		p.SequenceKey = "account-1"
		ps = append(ps, p)
	}
	ps = append(ps, job("seq"))
	_, err = producer.Insert(ctx, ps)
	require.NoError(t, err)

	got := claimKind(t, stale, "seq", 10)
	require.Len(t, got, 1, "only the job outside the sequence: %+v", got)
	require.Empty(t, got[0].SequenceKey)

	got = claimKind(t, producer, "seq", 10) // knows: the flow claim
	require.Len(t, got, 1, "the sequence's first job")
	require.Equal(t, ps[0].ID, got[0].ID)
}

// TestFlowPendingCounter: a kind's pending count follows every way a job
// leaves or re-enters pending (claim, retry, pause, resume, cancel), and
// counts the jobs already pending when MaxPending was set.
func TestFlowPendingCounter(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	insert := func(n int) error {
		ps := make([]store.InsertParams, n)
		for i := range ps {
			ps[i] = job("pc")
		}
		_, err := s.Insert(ctx, ps)
		return err
	}
	pending := func() int {
		t.Helper()
		// A refused insert of the bound + 1 reports the count.
		err := insert(1001)
		var pl *store.PendingLimitError
		require.True(t, errors.As(err, &pl), "refused: %v", err)
		return pl.Pending
	}
	require.NoError(t, insert(4)) // before any bound: counted when it is set
	require.NoError(t, s.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{{Kind: "pc", MaxPending: 1000}}}))
	require.Equal(t, 4, pending())
	require.NoError(t, insert(2))
	require.Equal(t, 6, pending())

	jobs := claimKind(t, s, "pc", 3)
	require.Len(t, jobs, 3)
	require.Equal(t, 3, pending(), "claimed jobs are not pending")
	_, err := s.Finish(ctx, []store.FinishParams{
		{Lease: store.Lease{ID: jobs[0].ID, Token: jobs[0].LeaseToken}, Outcome: store.OutcomeRetry, Error: "x"},
		{Lease: store.Lease{ID: jobs[1].ID, Token: jobs[1].LeaseToken}, Outcome: store.OutcomeSucceeded},
	})
	require.NoError(t, err)
	require.Equal(t, 4, pending(), "a retry is pending again, a success is not")

	waiting, err := s.List(ctx, &store.ListParams{Kind: "pc", States: []store.State{store.StateScheduled}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, waiting, 3)
	_, err = s.Control(ctx, waiting[0].ID, store.OpPause)
	require.NoError(t, err)
	_, err = s.Control(ctx, waiting[1].ID, store.OpCancel)
	require.NoError(t, err)
	require.Equal(t, 2, pending(), "paused and cancelled jobs are not pending")
	_, err = s.Control(ctx, waiting[0].ID, store.OpResume)
	require.NoError(t, err)
	require.Equal(t, 3, pending(), "a resumed job is")
}

// TestFlowClaimRefusedData: a flow claim (priority aging) of a kind
// PostgreSQL refuses as text fails with store.ErrInvalidParams, and
// leaves its connection out of the transaction: the claims after it work.
func TestFlowClaimRefusedData(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	_, err := s.Insert(ctx, []store.InsertParams{job("ok")})
	require.NoError(t, err)
	aged := func(kind string) (*store.ClaimResult, error) {
		return s.Claim(ctx, &store.ClaimParams{Owner: "o", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}},
			Limit: 1, LeaseDuration: time.Minute, AgeAfter: time.Minute})
	}
	for range 10 { // more than the pool's connections
		_, err := aged("bad\xff")
		require.ErrorIs(t, err, store.ErrInvalidParams)
	}
	res, err := aged("ok")
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
}

// TestFlowClaimLocks: a claim of kinds with at most a breaker shares the
// kinds' flows rows, so such claims on several hosts run side by side (a
// closing breaker releases its held jobs to every host at once); a kind
// with a concurrency limit or a rate is still claimed under FOR UPDATE,
// one claim at a time. Another transaction holds each kind's row FOR
// SHARE, as a claim in flight would: the breaker's claim goes through,
// the others wait.
func TestFlowClaimLocks(t *testing.T) {
	t.Parallel()
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	breaker := store.BreakerConfig{Failures: 3, CoolDown: time.Second, MaxCoolDown: time.Minute}
	tests := []struct {
		name  string
		flow  store.FlowConfig
		waits bool
	}{
		{name: "breaker", flow: store.FlowConfig{Kind: "lk.breaker", Breaker: breaker}},
		{name: "concurrency", flow: store.FlowConfig{Kind: "lk.conc", Concurrency: 5}, waits: true},
		{name: "rate", flow: store.FlowConfig{Kind: "lk.rate", Rate: store.RateLimit{Limit: 100, Period: time.Second}}, waits: true},
		{name: "breaker and concurrency", flow: store.FlowConfig{Kind: "lk.both", Breaker: breaker, Concurrency: 5}, waits: true},
	}
	var flows []store.FlowConfig
	for _, tc := range tests {
		flows = append(flows, tc.flow)
	}
	require.NoError(t, s.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: flows}))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Insert(ctx, []store.InsertParams{job(tc.flow.Kind)})
			require.NoError(t, err)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, `SELECT 1 FROM ax.flows WHERE kind = $1 FOR SHARE`, tc.flow.Kind)
			require.NoError(t, err)

			// A claim that must wait is cut short after 500 ms; one that
			// must not gets the test's whole context, so that a slow
			// machine (the package's tests run in parallel) is not taken
			// for a wait: if it did wait for the row, it would wait until
			// the context ends and fail all the same.
			wait := time.Minute
			if tc.waits {
				wait = 500 * time.Millisecond
			}
			cctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			res, err := s.Claim(cctx, &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: tc.flow.Kind, Limit: 1}},
				Limit: 1, LeaseDuration: time.Hour})
			if tc.waits {
				require.Error(t, err, "the claim did not wait for the row")
				return
			}
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
		})
	}
}
