package storetest

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// Helpers of the flow-control areas (store.FlowStore).

// flowNode is the node name the suite declares flow settings as.
const flowNode = "storetest-flow"

// setFlows declares cfgs and requires success.
func setFlows(t *testing.T, st store.Store, cfgs ...store.FlowConfig) {
	t.Helper()
	require.NoError(t, as[store.FlowStore](t, st).SetFlows(t.Context(), &store.SetFlowsParams{Node: flowNode, Flows: cfgs}))
}

// flowOf returns the stored state of kind, which must have settings.
func flowOf(t *testing.T, st store.Store, kind string) store.FlowState {
	t.Helper()
	flows, err := as[store.FlowStore](t, st).Flows(t.Context())
	require.NoError(t, err)
	for _, f := range flows {
		if f.Config.Kind == kind {
			return f
		}
	}
	t.Fatalf("no flow settings for kind %q in %+v", kind, flows)
	return store.FlowState{}
}

// finishFlow applies ps through FinishFlow and requires every row applied.
func finishFlow(t *testing.T, st store.Store, ps ...store.FinishParams) []store.BreakerTransition {
	t.Helper()
	res, err := as[store.FlowStore](t, st).FinishFlow(t.Context(), ps)
	require.NoError(t, err)
	require.Len(t, res.OK, len(ps))
	for i, ok := range res.OK {
		require.True(t, ok, "row %d not applied", i)
	}
	return res.Breakers
}

// outcome returns the FinishParams of outcome out for the claimed job j.
func outcome(j *store.JobRecord, out store.Outcome) store.FinishParams {
	p := store.FinishParams{Lease: lease(j), Outcome: out}
	if out == store.OutcomeRetry || out == store.OutcomeDead {
		p.Error = "boom"
	}
	return p
}

// insertN inserts n due jobs of kind changed by mods.
func insertN(t *testing.T, st store.Store, kind string, n int, mods ...func(*store.InsertParams)) {
	t.Helper()
	ps := make([]store.InsertParams, n)
	for i := range ps {
		ps[i] = params(t, kind, mods...)
	}
	insert(t, st, ps...)
}

// withPayload sets the job's payload.
func withPayload(payload string) func(*store.InsertParams) {
	return func(p *store.InsertParams) { p.Payload = []byte(payload) }
}

// withSequence sets the job's sequence key.
func withSequence(key string) func(*store.InsertParams) {
	return func(p *store.InsertParams) { p.SequenceKey = key }
}

// testFlowSettings checks SetFlows and Flows: the round trip, the last
// writer winning, a config that sets nothing removing the kind, and
// refused settings changing nothing.
func testFlowSettings(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	t.Run("RoundTrip", func(t *testing.T) {
		st := newStore(t)
		flows, err := as[store.FlowStore](t, st).Flows(t.Context())
		require.NoError(t, err)
		require.Empty(t, flows)
		b := store.FlowConfig{
			Kind: "fs.b", Concurrency: 5, Partition: store.PartitionSource{Metadata: "tenant"}, PartitionConcurrency: 2,
			Rate: store.RateLimit{Limit: 100, Period: time.Second}, PartitionRate: store.RateLimit{Limit: 10, Period: time.Minute},
			Breaker: store.BreakerConfig{Failures: 5, FailureRatio: 0.5, Window: time.Minute, MinAttempts: 10,
				CoolDown: 30 * time.Second, MaxCoolDown: 10 * time.Minute},
			MaxPending: 1000,
		}
		a := store.FlowConfig{Kind: "fs.a", Concurrency: 1}
		before := storeNow(t, st)
		setFlows(t, st, b, a)
		after := storeNow(t, st)
		flows, err = as[store.FlowStore](t, st).Flows(t.Context())
		require.NoError(t, err)
		require.Len(t, flows, 2)
		for i, want := range []store.FlowConfig{a, b} {
			f := flows[i]
			require.Equal(t, want, f.Config, "ordered by kind, kept as declared")
			require.Equal(t, flowNode, f.DeclaredBy)
			requireBetween(t, before, after, f.DeclaredAt, "DeclaredAt")
			require.Equal(t, store.BreakerClosed, f.Breaker.State)
			require.Zero(t, f.Running)
			requireTimeNear(t, after, f.Now, clockTolerance)
		}
		require.Equal(t, b.Rate.Burst(), flows[1].RateAvailable, "a fresh bucket is full")
	})
	t.Run("LastWriterWins", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fs.k", Concurrency: 1, MaxPending: 10})
		setFlows(t, st, store.FlowConfig{Kind: "fs.k", Concurrency: 3})
		require.Equal(t, store.FlowConfig{Kind: "fs.k", Concurrency: 3}, flowOf(t, st, "fs.k").Config)
		setFlows(t, st, store.FlowConfig{Kind: "fs.k"})
		flows, err := as[store.FlowStore](t, st).Flows(t.Context())
		require.NoError(t, err)
		require.Empty(t, flows, "settings that set nothing remove the kind")
	})
	t.Run("Refused", func(t *testing.T) {
		ok := store.BreakerConfig{Failures: 1, CoolDown: time.Second, MaxCoolDown: time.Second}
		cases := []struct {
			name string
			cfg  store.FlowConfig
		}{
			{"EmptyKind", store.FlowConfig{Concurrency: 1}},
			{"KindNUL", store.FlowConfig{Kind: "a\x00b", Concurrency: 1}},
			{"NegativeConcurrency", store.FlowConfig{Kind: "k", Concurrency: -1}},
			{"HugeConcurrency", store.FlowConfig{Kind: "k", Concurrency: math.MaxInt32 + 1}},
			{"NegativeMaxPending", store.FlowConfig{Kind: "k", MaxPending: -1}},
			{"PartitionLimitWithoutSource", store.FlowConfig{Kind: "k", PartitionConcurrency: 1}},
			{"PartitionRateWithoutSource", store.FlowConfig{Kind: "k", PartitionRate: store.RateLimit{Limit: 1, Period: time.Second}}},
			{"TwoSources", store.FlowConfig{Kind: "k", Partition: store.PartitionSource{Metadata: "a", PayloadField: "b"}, PartitionConcurrency: 1}},
			{"SourceOverlong", store.FlowConfig{Kind: "k", Partition: store.PartitionSource{Metadata: strings.Repeat("m", 256)}, PartitionConcurrency: 1}},
			{"RateWithoutPeriod", store.FlowConfig{Kind: "k", Rate: store.RateLimit{Limit: 1}}},
			{"PeriodWithoutRate", store.FlowConfig{Kind: "k", Rate: store.RateLimit{Period: time.Second}}},
			{"RateTooFast", store.FlowConfig{Kind: "k", Rate: store.RateLimit{Limit: 2000, Period: time.Millisecond}}},
			{"RatePeriodNotMicroseconds", store.FlowConfig{Kind: "k", Rate: store.RateLimit{Limit: 1, Period: time.Second + 1}}},
			{"BreakerWithoutThreshold", store.FlowConfig{Kind: "k", Breaker: store.BreakerConfig{CoolDown: time.Second, MaxCoolDown: time.Second}}},
			{"BreakerWithoutCoolDown", store.FlowConfig{Kind: "k", Breaker: store.BreakerConfig{Failures: 1}}},
			{"BreakerMaxBelowCoolDown", store.FlowConfig{Kind: "k", Breaker: store.BreakerConfig{Failures: 1, CoolDown: time.Minute, MaxCoolDown: time.Second}}},
			{"BreakerRatioAboveOne", store.FlowConfig{Kind: "k", Breaker: store.BreakerConfig{FailureRatio: 1.5, Window: time.Second, MinAttempts: 1, CoolDown: time.Second, MaxCoolDown: time.Second}}},
			{"BreakerRatioNaN", store.FlowConfig{Kind: "k", Breaker: store.BreakerConfig{FailureRatio: math.NaN(), Window: time.Second, MinAttempts: 1, CoolDown: time.Second, MaxCoolDown: time.Second}}},
			{"BreakerRatioWithoutWindow", store.FlowConfig{Kind: "k", Breaker: store.BreakerConfig{FailureRatio: 0.5, MinAttempts: 1, CoolDown: time.Second, MaxCoolDown: time.Second}}},
			{"BreakerWindowWithoutRatio", store.FlowConfig{Kind: "k", Breaker: store.BreakerConfig{Failures: 1, Window: time.Second, CoolDown: time.Second, MaxCoolDown: time.Second}}},
			{"OneOkOneBad", store.FlowConfig{Kind: "k", Breaker: ok, Concurrency: -5}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				fs := as[store.FlowStore](t, st)
				err := fs.SetFlows(t.Context(), &store.SetFlowsParams{Node: flowNode,
					Flows: []store.FlowConfig{{Kind: "fine", Concurrency: 1}, c.cfg}})
				require.ErrorIs(t, err, store.ErrInvalidParams)
				flows, err := fs.Flows(t.Context())
				require.NoError(t, err)
				require.Empty(t, flows, "a refused call stores nothing")
			})
		}
		st := newStore(t)
		fs := as[store.FlowStore](t, st)
		require.ErrorIs(t, fs.SetFlows(t.Context(), nil), store.ErrInvalidParams)
		require.ErrorIs(t, fs.SetFlows(t.Context(), &store.SetFlowsParams{Node: flowNode, Flows: []store.FlowConfig{
			{Kind: "twice", Concurrency: 1}, {Kind: "twice", Concurrency: 2}}}), store.ErrInvalidParams)
	})
}
