package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFlowPartitionBreaker checks breakers per partition
// (store.PartitionBreakerStore): one partition's failures open only its
// breaker and hold back only its jobs, while every other partition's
// jobs start; its probe is one of its own jobs, one at a time; a breaker
// closed with no failure counted is forgotten (bounded state); opening and
// closing by hand; validation. A FlowStore without the ability must
// refuse the settings in SetFlows.
func testFlowPartitionBreaker(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	const kind = "fpb"
	src := store.PartitionSource{Metadata: "tenant"}
	cfgWith := func(coolDown time.Duration) store.FlowConfig {
		return store.FlowConfig{Kind: kind, Partition: src,
			PartitionBreaker: store.BreakerConfig{Failures: 2, CoolDown: coolDown, MaxCoolDown: 4 * coolDown}}
	}
	if _, ok := newStore(t).(store.PartitionBreakerStore); !ok {
		t.Run("Refused", func(t *testing.T) {
			st := newStore(t)
			err := as[store.FlowStore](t, st).SetFlows(t.Context(), &store.SetFlowsParams{Node: flowNode, Flows: []store.FlowConfig{cfgWith(time.Hour)}})
			require.ErrorIs(t, err, errors.ErrUnsupported, "a store without partition breakers refuses them")
			flows, err := as[store.FlowStore](t, st).Flows(t.Context())
			require.NoError(t, err)
			require.Empty(t, flows, "and stores nothing")
		})
		return
	}
	tenant := func(key string) func(*store.InsertParams) {
		return withMetadata(map[string]string{"tenant": key})
	}
	// insertTenants inserts n due jobs for each tenant.
	insertTenants := func(t *testing.T, st store.Store, n int, tenants ...string) {
		t.Helper()
		for _, tn := range tenants {
			insertN(t, st, kind, n, tenant(tn))
		}
	}
	// byTenant counts jobs per partition key.
	byTenant := func(jobs []*store.JobRecord) map[string]int {
		m := map[string]int{}
		for _, j := range jobs {
			m[j.PartitionKey]++
		}
		return m
	}
	// failAll fails jobs of partition key and succeeds the others, in
	// one call, and returns the transitions.
	failOnly := func(t *testing.T, st store.Store, jobs []*store.JobRecord, key string) []store.BreakerTransition {
		t.Helper()
		ps := make([]store.FinishParams, len(jobs))
		for i, j := range jobs {
			out := store.OutcomeSucceeded
			if j.PartitionKey == key {
				out = store.OutcomeRetry
			}
			ps[i] = outcome(j, out)
		}
		return finishFlow(t, st, ps...)
	}
	pbs := func(t *testing.T, st store.Store) []store.PartitionBreakerState {
		t.Helper()
		list, err := as[store.PartitionBreakerStore](t, st).PartitionBreakers(t.Context(), kind)
		require.NoError(t, err)
		return list
	}

	t.Run("OnlyTheFailingPartitionStops", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, cfgWith(time.Hour))
		tenants := []string{"down", "t1", "t2", "t3", "t4", "t5", "t6", "t7", ""}
		insertTenants(t, st, 3, tenants...)
		jobs := claim(t, st, claimParams(100, longLease, kind)).Jobs
		require.Len(t, jobs, 3*len(tenants))

		tr := failOnly(t, st, jobs, "down")
		require.Len(t, tr, 1, "the second failure in a row of the partition opens its breaker, once: %+v", tr)
		require.Equal(t, kind, tr[0].Kind)
		require.True(t, tr[0].Partitioned)
		require.Equal(t, "down", tr[0].PartitionKey)
		require.Equal(t, store.BreakerClosed, tr[0].From)
		require.Equal(t, store.BreakerOpen, tr[0].To)
		require.Equal(t, time.Hour, tr[0].CoolDown)

		// Every other partition's jobs start; none of the open one's
		// (its three failed jobs are due again, and three new ones).
		insertTenants(t, st, 3, tenants...)
		res := claim(t, st, claimParams(100, longLease, kind))
		got := byTenant(res.Jobs)
		require.Zero(t, got["down"], "the open partition starts nothing")
		for _, tn := range tenants[1:] {
			require.Equal(t, 3, got[tn], "partition %q starts all its jobs", tn)
		}
		require.Empty(t, res.Breakers)
		list := pbs(t, st)
		require.Len(t, list, 1)
		require.Equal(t, "down", list[0].PartitionKey)
		require.Equal(t, store.BreakerOpen, list[0].Breaker.State)
		requireTimeNear(t, list[0].Breaker.ProbeAt, res.NextRunAt, storedTolerance, "the open partition's jobs wait for its cool-down")
		f := flowOf(t, st, kind)
		require.Equal(t, 1, f.PartitionBreakersOpen)
		require.Equal(t, store.BreakerClosed, f.Breaker.State, "the kind has no breaker of its own")

		// The healthy partitions go on.
		require.Empty(t, failOnly(t, st, res.Jobs, "down"))
		insertTenants(t, st, 1, tenants[1:]...)
		require.Len(t, claim(t, st, claimParams(100, longLease, kind)).Jobs, len(tenants)-1)
	})
	t.Run("ProbeOfThePartition", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, cfgWith(100*time.Millisecond))
		insertTenants(t, st, 4, "down", "up")
		jobs := claim(t, st, claimParams(100, longLease, kind)).Jobs
		require.Len(t, failOnly(t, st, jobs, "down"), 1)
		waitUntilStoreTime(t, st, pbs(t, st)[0].Breaker.ProbeAt)

		insertTenants(t, st, 2, "up")
		res := claim(t, st, claimParams(100, longLease, kind))
		got := byTenant(res.Jobs)
		require.Equal(t, 1, got["down"], "one probe of the partition: %v", got)
		require.Equal(t, 2, got["up"])
		require.Len(t, res.Breakers, 1)
		require.True(t, res.Breakers[0].Partitioned)
		require.Equal(t, "down", res.Breakers[0].PartitionKey)
		require.Equal(t, store.BreakerHalfOpen, res.Breakers[0].To)
		var probe *store.JobRecord
		for _, j := range res.Jobs {
			if j.PartitionKey == "down" {
				probe = j
			}
		}
		res = claim(t, st, claimParams(100, longLease, kind))
		require.Empty(t, res.Jobs, "the probe runs alone")
		require.True(t, res.NextRunAt.IsZero(), "held until the probe ends: %s", res.NextRunAt)

		tr := finishFlow(t, st, outcome(probe, store.OutcomeSucceeded))
		require.Len(t, tr, 1)
		require.Equal(t, store.BreakerClosed, tr[0].To)
		require.Equal(t, "down", tr[0].PartitionKey)
		require.Empty(t, pbs(t, st), "a closed breaker with no failure is forgotten")
		require.Equal(t, 3, byTenant(claim(t, st, claimParams(100, longLease, kind)).Jobs)["down"], "the rest of the partition starts")
	})
	t.Run("FailedProbeReopens", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, cfgWith(50*time.Millisecond))
		insertTenants(t, st, 3, "down")
		jobs := claim(t, st, claimParams(2, longLease, kind)).Jobs
		require.Len(t, failOnly(t, st, jobs, "down"), 1)
		waitUntilStoreTime(t, st, pbs(t, st)[0].Breaker.ProbeAt)
		probe := claim(t, st, claimParams(100, longLease, kind)).Jobs
		require.Len(t, probe, 1)
		tr := failOnly(t, st, probe, "down")
		require.Len(t, tr, 1)
		require.Equal(t, store.BreakerHalfOpen, tr[0].From)
		require.Equal(t, store.BreakerOpen, tr[0].To)
		require.Equal(t, 100*time.Millisecond, tr[0].CoolDown, "twice the last cool-down")
	})
	t.Run("StateOnlyForFailingPartitions", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, cfgWith(time.Hour))
		const n = 50
		for i := range n {
			insertTenants(t, st, 1, fmt.Sprint("p", i))
		}
		jobs := claim(t, st, claimParams(100, longLease, kind)).Jobs
		require.Len(t, jobs, n)
		// One failure each: n breakers count one failure.
		ps := make([]store.FinishParams, n)
		for i, j := range jobs {
			ps[i] = outcome(j, store.OutcomeRetry)
		}
		require.Empty(t, finishFlow(t, st, ps...))
		list := pbs(t, st)
		require.Len(t, list, n)
		require.Equal(t, 1, list[0].Breaker.Failures)
		// A success each resets them: nothing is kept.
		jobs = claim(t, st, claimParams(100, longLease, kind)).Jobs
		require.Len(t, jobs, n)
		for i, j := range jobs {
			ps[i] = outcome(j, store.OutcomeSucceeded)
		}
		require.Empty(t, finishFlow(t, st, ps...))
		require.Empty(t, pbs(t, st), "closed breakers with no failure are not kept")
		require.Zero(t, flowOf(t, st, kind).PartitionBreakersOpen)
	})
	t.Run("PruneForgetsIdlePartitions", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PartitionBreakerStore](t, st)
		setFlows(t, st, cfgWith(time.Hour))
		insertTenants(t, st, 1, "gone")
		insertTenants(t, st, 2, "busy")
		jobs := claim(t, st, claimParams(10, longLease, kind)).Jobs
		require.Len(t, jobs, 3)
		var fin []store.FinishParams
		busy := 0
		for _, j := range jobs {
			switch {
			case j.PartitionKey == "gone":
				fin = append(fin, outcome(j, store.OutcomeDead)) // its last job
			case busy == 0:
				busy++
				fin = append(fin, outcome(j, store.OutcomeRetry)) // retrying: the partition has a job
			}
		}
		require.Empty(t, finishFlow(t, st, fin...))
		_, err := ps.SetPartitionBreaker(t.Context(), kind, "idle-open", true)
		require.NoError(t, err)
		require.Len(t, pbs(t, st), 3)

		_, err = as[store.Pruner](t, st).Prune(t.Context(), &store.PruneParams{Limit: 10, Retention: time.Hour})
		require.NoError(t, err)
		var keys []string
		for _, p := range pbs(t, st) {
			keys = append(keys, p.PartitionKey)
		}
		require.Equal(t, []string{"busy", "idle-open"}, keys,
			"a closed breaker of a partition with no job left is forgotten; one with jobs, and an open one, are kept")
	})
	t.Run("ByHand", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PartitionBreakerStore](t, st)
		setFlows(t, st, cfgWith(time.Hour))
		insertTenants(t, st, 2, "x", "y")
		rec := newRecorder()
		unsubscribe := as[store.Notifier](t, st).Subscribe(rec.record)
		defer unsubscribe()

		res, err := ps.SetPartitionBreaker(t.Context(), kind, "x", true)
		require.NoError(t, err)
		require.NotNil(t, res.Transition)
		require.Equal(t, store.BreakerOpen, res.Transition.To)
		require.True(t, res.Transition.Partitioned)
		require.Equal(t, "x", res.Transition.PartitionKey)
		require.Equal(t, store.BreakerOpen, res.State.Breaker.State)
		require.Equal(t, "x", res.State.PartitionKey)
		got := byTenant(claim(t, st, claimParams(10, longLease, kind)).Jobs)
		require.Equal(t, map[string]int{"y": 2}, got, "only the partition opened by hand waits")
		res, err = ps.SetPartitionBreaker(t.Context(), kind, "x", true)
		require.NoError(t, err)
		require.Nil(t, res.Transition, "already open")

		at := storeNow(t, st)
		res, err = ps.SetPartitionBreaker(t.Context(), kind, "x", false)
		require.NoError(t, err)
		require.Equal(t, store.BreakerClosed, res.Transition.To)
		require.Equal(t, store.BreakerClosed, res.State.Breaker.State)
		rec.waitFor(t, "for the closed partition breaker", notifiesRunAt(kind, at))
		require.Equal(t, map[string]int{"x": 2}, byTenant(claim(t, st, claimParams(10, longLease, kind)).Jobs))
		require.Empty(t, pbs(t, st))
		res, err = ps.SetPartitionBreaker(t.Context(), kind, "x", false)
		require.NoError(t, err)
		require.Nil(t, res.Transition, "already closed")

		_, err = ps.SetPartitionBreaker(t.Context(), kind, "never-seen", true)
		require.NoError(t, err, "a partition with no jobs yet can be opened")

		setFlows(t, st, store.FlowConfig{Kind: "fpb.plain", Concurrency: 1})
		_, err = ps.SetPartitionBreaker(t.Context(), "fpb.plain", "x", true)
		require.ErrorIs(t, err, store.ErrNotFound, "a kind without a partition breaker")
		_, err = ps.PartitionBreakers(t.Context(), "fpb.none")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = ps.SetPartitionBreaker(t.Context(), "", "x", true)
		require.ErrorIs(t, err, store.ErrInvalidParams)
		_, err = ps.SetPartitionBreaker(t.Context(), kind, "a\x00b", true)
		require.ErrorIs(t, err, store.ErrInvalidParams)
	})
	t.Run("Declarations", func(t *testing.T) {
		st := newStore(t)
		ps := as[store.PartitionBreakerStore](t, st)
		cfg := cfgWith(time.Hour)
		setFlows(t, st, cfg)
		_, err := ps.SetPartitionBreaker(t.Context(), kind, "x", true)
		require.NoError(t, err)
		cfg.Concurrency = 10
		setFlows(t, st, cfg) // a host restarting with new settings
		require.Len(t, pbs(t, st), 1, "a restart does not close an open partition breaker")
		cfg.PartitionBreaker = store.BreakerConfig{}
		setFlows(t, st, cfg)
		_, err = ps.PartitionBreakers(t.Context(), kind)
		require.ErrorIs(t, err, store.ErrNotFound, "no partition breaker any more")
		setFlows(t, st, cfgWith(time.Hour))
		require.Empty(t, pbs(t, st), "its state went with it")

		for name, bad := range map[string]store.FlowConfig{
			"NoSource": {Kind: kind, PartitionBreaker: store.BreakerConfig{Failures: 1, CoolDown: time.Second, MaxCoolDown: time.Second}},
			"Ratio": {Kind: kind, Partition: src, PartitionBreaker: store.BreakerConfig{
				FailureRatio: 0.5, Window: time.Minute, MinAttempts: 2, CoolDown: time.Second, MaxCoolDown: time.Second}},
			"NoCoolDown": {Kind: kind, Partition: src, PartitionBreaker: store.BreakerConfig{Failures: 1}},
		} {
			t.Run(name, func(t *testing.T) {
				err := ps.SetFlows(t.Context(), &store.SetFlowsParams{Node: flowNode, Flows: []store.FlowConfig{bad}})
				require.ErrorIs(t, err, store.ErrInvalidParams)
			})
		}
	})
}
