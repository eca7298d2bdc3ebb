package storetest

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFlowConcurrency checks the cluster-wide Concurrency of a kind: a
// claim takes only what keeps the kind's running jobs within it, a slot
// frees when a job leaves running by Finish or by a rescue, many
// claimers at once never exceed it, other kinds are not held back, and a
// freed slot notifies.
func testFlowConcurrency(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	t.Run("Limit", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fc", Concurrency: 3})
		insertN(t, st, "fc", 10)
		insertN(t, st, "fc.free", 5)
		res := claim(t, st, claimParams(100, longLease, "fc", "fc.free"))
		var n int
		for _, j := range res.Jobs {
			if j.Kind == "fc" {
				n++
			}
		}
		require.Equal(t, 3, n, "the limit holds within one claim")
		require.Len(t, res.Jobs, 8, "another kind is not held back")
		require.True(t, res.NextRunAt.IsZero(), "jobs held until a running one ends are not due: %s", res.NextRunAt)
		require.Empty(t, claim(t, st, claimParams(100, longLease, "fc")).Jobs, "at the limit")
		require.EqualValues(t, 3, flowOf(t, st, "fc").Running)

		var held *store.JobRecord
		for _, j := range res.Jobs {
			if j.Kind == "fc" {
				held = j
				break
			}
		}
		finish(t, st, outcome(held, store.OutcomeSucceeded))
		require.Len(t, claim(t, st, claimParams(100, longLease, "fc")).Jobs, 1, "a finished job frees one slot")
	})
	t.Run("RescueFreesSlots", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fc", Concurrency: 2})
		insertN(t, st, "fc", 4)
		res := claim(t, st, claimParams(10, shortLease, "fc"))
		require.Len(t, res.Jobs, 2)
		require.Empty(t, claim(t, st, claimParams(10, longLease, "fc")).Jobs)
		waitUntilStoreTime(t, st, res.Jobs[1].LeaseExpiresAt)
		rescued, err := st.RescueExpired(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, rescued, 2)
		require.Len(t, claim(t, st, claimParams(10, longLease, "fc")).Jobs, 2, "the dead owner's slots are free")
	})
	t.Run("Concurrent", func(t *testing.T) {
		// Eight claimers at once, each holding what it claimed and
		// finishing one job per round, so that the kind stays at its
		// limit and every claim races for the slots others free.
		st := newStore(t)
		const limit, total = 5, 200
		setFlows(t, st, store.FlowConfig{Kind: "fc", Concurrency: limit})
		insertN(t, st, "fc", total)
		var (
			mu   sync.Mutex
			done int
			peak int64
			wg   sync.WaitGroup
		)
		ctx := ctxTimeout(t)
		for range 8 {
			wg.Go(func() {
				var held []*store.JobRecord
				for ctx.Err() == nil {
					res, err := st.Claim(ctx, claimParams(3, longLease, "fc"))
					if !assertNoError(t, err) {
						return
					}
					held = append(held, res.Jobs...)
					flows, err := as[store.FlowStore](t, st).Flows(ctx)
					if !assertNoError(t, err) {
						return
					}
					mu.Lock()
					peak = max(peak, flows[0].Running)
					finished := done
					mu.Unlock()
					if finished == total {
						return
					}
					if len(held) == 0 {
						continue
					}
					if _, err := st.Finish(ctx, []store.FinishParams{outcome(held[0], store.OutcomeSucceeded)}); !assertNoError(t, err) {
						return
					}
					held = held[1:]
					mu.Lock()
					done++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Equal(t, total, done)
		require.Equal(t, int64(limit), peak, "jobs running at once, as the store counts them")
	})
	t.Run("FreedSlotNotifies", func(t *testing.T) {
		st := newStore(t)
		n := as[store.Notifier](t, st)
		setFlows(t, st, store.FlowConfig{Kind: "fc", Concurrency: 1})
		insertN(t, st, "fc", 2)
		j := claim(t, st, claimParams(10, longLease, "fc")).Jobs[0]
		rec := newRecorder()
		unsubscribe := n.Subscribe(rec.record)
		defer unsubscribe()
		at := storeNow(t, st)
		finish(t, st, outcome(j, store.OutcomeSucceeded))
		rec.waitFor(t, "for the freed slot", notifiesRunAt("fc", at))
	})
}

// assertNoError reports err to t (from any goroutine) and whether it was
// nil.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// testFlowPartitions checks partitions: the key derived from metadata or
// a payload field as PartitionKeyOf says, PartitionConcurrency per key
// with other keys going on, and refused keys.
func testFlowPartitions(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	t.Run("Keys", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st,
			store.FlowConfig{Kind: "fp.md", Partition: store.PartitionSource{Metadata: "tenant"}, PartitionConcurrency: 1},
			store.FlowConfig{Kind: "fp.pl", Partition: store.PartitionSource{PayloadField: "customer"}, PartitionConcurrency: 1})
		cases := []struct {
			name string
			kind string
			mod  func(*store.InsertParams)
			want string
		}{
			{"Metadata", "fp.md", withMetadata(map[string]string{"tenant": "acme", "x": "y"}), "acme"},
			{"MetadataMissing", "fp.md", withMetadata(map[string]string{"x": "y"}), ""},
			{"String", "fp.pl", withPayload(`{"customer":"c-1","n":2}`), "c-1"},
			{"StringEscaped", "fp.pl", withPayload(`{"customer":"\u00e9t\u00e9"}`), "été"},
			{"Number", "fp.pl", withPayload(`{"customer": 42}`), "42"},
			{"NumberAsWritten", "fp.pl", withPayload(`{"customer":1.50}`), "1.50"},
			{"Bool", "fp.pl", withPayload(`{"customer":true}`), "true"},
			{"Null", "fp.pl", withPayload(`{"customer":null}`), ""},
			{"Object", "fp.pl", withPayload(`{"customer":{"id":1}}`), ""},
			{"Array", "fp.pl", withPayload(`{"customer":[1]}`), ""},
			{"Missing", "fp.pl", withPayload(`{"other":"x"}`), ""},
			{"NotAnObject", "fp.pl", withPayload(`["customer"]`), ""},
			{"Repeated", "fp.pl", withPayload(`{"customer":"a","customer":"b"}`), "b"},
			{"Nested", "fp.pl", withPayload(`{"x":{"customer":"no"}}`), ""},
			{"OtherKind", "fp.none", withMetadata(map[string]string{"tenant": "acme"}), ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				id := insertOne(t, st, c.kind, c.mod)
				require.Equal(t, c.want, get(t, st, id).PartitionKey)
			})
		}
	})
	t.Run("RefusedKeys", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fp", Partition: store.PartitionSource{PayloadField: "c"}, PartitionConcurrency: 1})
		for name, payload := range map[string]string{
			"Overlong": `{"c":"` + strings.Repeat("x", store.MaxPartitionKeyLength+1) + `"}`,
			"NUL":      `{"c":"a\u0000b"}`,
		} {
			t.Run(name, func(t *testing.T) {
				_, err := st.Insert(t.Context(), []store.InsertParams{params(t, "fp", withPayload(payload))})
				require.ErrorIs(t, err, store.ErrInvalidParams)
			})
		}
		id := insertOne(t, st, "fp", withPayload(`{"c":"`+strings.Repeat("x", store.MaxPartitionKeyLength)+`"}`))
		require.Len(t, get(t, st, id).PartitionKey, store.MaxPartitionKeyLength, "the longest key is kept")
	})
	t.Run("LimitPerKey", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fp", Partition: store.PartitionSource{Metadata: "tenant"}, PartitionConcurrency: 2})
		// The first jobs all belong to one tenant: it must not keep the
		// others from starting.
		insertN(t, st, "fp", 6, withMetadata(map[string]string{"tenant": "big"}))
		insertN(t, st, "fp", 3, withMetadata(map[string]string{"tenant": "small"}))
		insertN(t, st, "fp", 3) // no tenant: the partition ""
		res := claim(t, st, claimParams(100, longLease, "fp"))
		per := make(map[string]int)
		for _, j := range res.Jobs {
			per[j.PartitionKey]++
		}
		require.Equal(t, map[string]int{"big": 2, "small": 2, "": 2}, per)
		require.True(t, res.NextRunAt.IsZero(), "held jobs are not due: %s", res.NextRunAt)
		finish(t, st, outcome(res.Jobs[0], store.OutcomeSucceeded))
		again := claim(t, st, claimParams(100, longLease, "fp"))
		require.Len(t, again.Jobs, 1)
		require.Equal(t, res.Jobs[0].PartitionKey, again.Jobs[0].PartitionKey, "the freed slot is its partition's")
	})
	t.Run("WithGlobalLimit", func(t *testing.T) {
		st := newStore(t)
		setFlows(t, st, store.FlowConfig{Kind: "fp", Concurrency: 3, Partition: store.PartitionSource{Metadata: "t"}, PartitionConcurrency: 2})
		for _, tenant := range []string{"a", "b", "c"} {
			insertN(t, st, "fp", 2, withMetadata(map[string]string{"t": tenant}))
		}
		res := claim(t, st, claimParams(100, longLease, "fp"))
		require.Len(t, res.Jobs, 3, "the kind's limit caps the partitions'")
	})
}
