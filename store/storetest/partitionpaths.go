package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// partitionPath inserts a job of kind, changed by mod, by one of the ways
// a store inserts jobs, and returns the ID of that job.
type partitionPath struct {
	name string
	// have reports whether st has what the path needs (nil: any store).
	have func(st store.Store) bool
	run  func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID
}

// partitionPaths are every way a job comes into a store: each must give
// the job the partition key PartitionKeyOf derives (issue 40: batch
// children, follow-ups and periodic ticks landed in the partition "" on
// pgstore, where one busy tenant held back all the others). A new way of
// inserting jobs belongs here.
var partitionPaths = []partitionPath{
	{"InsertOne", nil, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		return insertOne(t, st, kind, mod)
	}},
	{"InsertMany", nil, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		ps := []store.InsertParams{params(t, "pp.other"), params(t, kind, mod), params(t, kind)}
		return insert(t, st, ps...)[1]
	}},
	{"InsertOneKeyed", nil, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		return insertOne(t, st, kind, mod, withUniqueKey("k-"+newID(t).String()))
	}},
	{"InsertManyKeyed", nil, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		ps := []store.InsertParams{params(t, kind, withUniqueKey("a-"+newID(t).String())),
			params(t, kind, mod, withUniqueKey("b-"+newID(t).String()))}
		return insert(t, st, ps...)[1]
	}},
	{"InsertWithFollowUps", nil, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		id := insertOne(t, st, kind, mod, withFollowUps(followUpTo("x", store.StateSucceeded)))
		require.Len(t, get(t, st, id).FollowUps, 1, "the follow-ups are kept")
		return id
	}},
	{"InsertManyWithFollowUps", nil, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		ps := []store.InsertParams{params(t, kind), params(t, kind, mod, withFollowUps(followUpTo("x", store.StateSucceeded)))}
		id := insert(t, st, ps...)[1]
		require.Len(t, get(t, st, id).FollowUps, 1, "the follow-ups are kept")
		return id
	}},
	{"BatchChild", hasBatches, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		p := &store.BatchParams{ID: newID(t), Completion: params(t, "pp.done"), Children: []store.InsertParams{params(t, kind, mod)}}
		insertBatch(t, st, p)
		return p.Children[0].ID
	}},
	{"BatchChildren", hasBatches, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		p := &store.BatchParams{ID: newID(t), Completion: params(t, "pp.done"),
			Children: []store.InsertParams{params(t, kind), params(t, kind, mod), params(t, "pp.other")}}
		insertBatch(t, st, p)
		return p.Children[1].ID
	}},
	{"BatchCompletion", hasBatches, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		p := &store.BatchParams{ID: newID(t), Completion: params(t, kind, mod),
			Children: []store.InsertParams{params(t, "pp.child")}}
		insertBatch(t, st, p)
		finishOne(t, st, claimOnly(t, st, "pp.child", p.Children[0].ID, longLease), store.FinishParams{Outcome: store.OutcomeSucceeded})
		return p.Completion.ID
	}},
	{"FollowUp", hasFollowUps, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		job := params(t, kind, mod)
		job.ID = uuid.Nil // follow-ups get their IDs when they are inserted
		parent := insertOne(t, st, "pp.parent", withFollowUps(store.FollowUp{On: []store.State{store.StateSucceeded}, Job: job}))
		finishOne(t, st, claimOnly(t, st, "pp.parent", parent, longLease), store.FinishParams{Outcome: store.OutcomeSucceeded})
		got, err := as[store.FollowUpStore](t, st).FollowUps(t.Context(), parent)
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0].ID
	}},
	{"Then", hasFollowUps, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		parent := insertOne(t, st, "pp.parent")
		then := params(t, kind, mod)
		finishOne(t, st, claimOnly(t, st, "pp.parent", parent, longLease),
			store.FinishParams{Outcome: store.OutcomeSucceeded, Then: []store.InsertParams{then}})
		return then.ID
	}},
	{"PeriodicTick", hasPeriodic, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		at := storeNow(t, st).Truncate(time.Second).Add(-time.Minute)
		job := params(t, kind, mod, withRunAt(at), withUniqueKey("periodic:pp:"+at.UTC().Format(time.RFC3339)))
		name := "pp-" + newID(t).String()
		res, err := as[store.PeriodicStore](t, st).FirePeriodic(t.Context(), &store.FirePeriodicParams{
			Name: name, Spec: "@every 1m", Ticks: []store.PeriodicTick{{At: at, Job: &job}}})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
		return res.Jobs[0].ID
	}},
	{"RunNowOfDead", nil, func(t *testing.T, st store.Store, kind string, mod func(*store.InsertParams)) uuid.UUID {
		id := insertOne(t, st, kind, mod, withMaxAttempts(1))
		// Other jobs of kind may be due: claim until this one is taken.
		var j *store.JobRecord
		for j == nil {
			res := claim(t, st, claimParams(100, longLease, kind))
			require.NotEmpty(t, res.Jobs, "job %s not claimed", id)
			for _, c := range res.Jobs {
				if c.ID == id {
					j = c
				}
			}
		}
		finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeDead, Error: "boom"})
		if a, ok := st.(store.Archiver); ok {
			_, err := a.Archive(t.Context(), 1000) // RunNow then restores it from the history
			require.NoError(t, err)
		}
		control(t, st, id, store.OpRunNow)
		return id
	}},
}

func hasBatches(st store.Store) bool   { _, ok := st.(store.BatchStore); return ok }
func hasFollowUps(st store.Store) bool { _, ok := st.(store.FollowUpStore); return ok }
func hasPeriodic(st store.Store) bool  { _, ok := st.(store.PeriodicStore); return ok }

// partitionCase is a job's metadata or payload and the source its kind
// derives keys from.
type partitionCase struct {
	name     string
	source   store.PartitionSource
	metadata map[string]string
	payload  string
}

var partitionCases = []partitionCase{
	{"Metadata", store.PartitionSource{Metadata: "tenant"}, map[string]string{"tenant": "acme", "x": "y"}, `{"n":1}`},
	{"MetadataUnicode", store.PartitionSource{Metadata: "tenant"}, map[string]string{"tenant": "été"}, `{"n":1}`},
	{"MetadataMissing", store.PartitionSource{Metadata: "tenant"}, map[string]string{"x": "y"}, `{"n":1}`},
	{"String", store.PartitionSource{PayloadField: "customer"}, nil, `{"customer":"c-1","n":2}`},
	{"StringEscaped", store.PartitionSource{PayloadField: "customer"}, nil, `{"customer":"\u00e9t\u00e9"}`},
	{"NumberAsWritten", store.PartitionSource{PayloadField: "customer"}, nil, `{"customer":1.50}`},
	{"Bool", store.PartitionSource{PayloadField: "customer"}, nil, `{"customer":true}`},
	{"Null", store.PartitionSource{PayloadField: "customer"}, nil, `{"customer":null}`},
	{"Object", store.PartitionSource{PayloadField: "customer"}, nil, `{"customer":{"id":1}}`},
	{"Repeated", store.PartitionSource{PayloadField: "customer"}, nil, `{"customer":"a","customer":"b"}`},
	{"NotAnObject", store.PartitionSource{PayloadField: "customer"}, nil, `["customer"]`},
	{"Missing", store.PartitionSource{PayloadField: "customer"}, nil, `{"other":"x"}`},
}

// testFlowPartitionPaths checks that every way of inserting jobs gives a
// job of a partitioned kind the key PartitionKeyOf derives, for every
// kind of source and value, and that batch children of one busy
// partition leave the others' slots free.
func testFlowPartitionPaths(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	for _, path := range partitionPaths {
		t.Run(path.name, func(t *testing.T) {
			st := newStore(t)
			if path.have != nil && !path.have(st) {
				t.Skipf("store %T cannot insert jobs this way", st)
			}
			for i, c := range partitionCases {
				kind := "pp." + c.name
				setFlows(t, st, store.FlowConfig{Kind: kind, Partition: c.source, PartitionConcurrency: 1})
				want, err := store.PartitionKeyOf(c.source, c.metadata, json.RawMessage(c.payload))
				require.NoError(t, err)
				mod := func(p *store.InsertParams) {
					p.Metadata, p.Payload = c.metadata, []byte(c.payload)
				}
				id := path.run(t, st, kind, mod)
				require.Equal(t, want, get(t, st, id).PartitionKey, "case %d %s: %s %v", i, c.name, c.payload, c.metadata)
			}
		})
	}
	// The sequence key, the other key a flow claim reads, is kept by every
	// path too: pgstore's templates (follow-ups, Then jobs, batch
	// completions) dropped it, so a sequence's follow-ups ran side by
	// side and out of order there.
	t.Run("SequenceKeyKept", func(t *testing.T) {
		for _, path := range partitionPaths {
			t.Run(path.name, func(t *testing.T) {
				st := newStore(t)
				if path.have != nil && !path.have(st) {
					t.Skipf("store %T cannot insert jobs this way", st)
				}
				id := path.run(t, st, "pp.seq", func(p *store.InsertParams) { p.SequenceKey = "seq-1" })
				require.Equal(t, "seq-1", get(t, st, id).SequenceKey)
			})
		}
	})
	// A job the store inserts from a template at a job's end (a Then job
	// here) whose key PartitionKeyOf would refuse cannot refuse that end:
	// it goes to the partition "" and the end applies, on every store.
	t.Run("TemplateKeyRefused", func(t *testing.T) {
		st := newStore(t)
		if !hasFollowUps(st) {
			t.Skipf("store %T keeps no follow-ups", st)
		}
		setFlows(t, st, store.FlowConfig{Kind: "pp.refused", Partition: store.PartitionSource{PayloadField: "c"},
			PartitionConcurrency: 1})
		for _, c := range []struct{ name, payload, want string }{
			{"NUL", `{"c":"a\u0000b"}`, ""},
			{"Overlong", `{"c":"` + strings.Repeat("x", store.MaxPartitionKeyLength+1) + `"}`, ""},
			{"Longest", `{"c":"` + strings.Repeat("x", store.MaxPartitionKeyLength) + `"}`, strings.Repeat("x", store.MaxPartitionKeyLength)},
		} {
			t.Run(c.name, func(t *testing.T) {
				parent := insertOne(t, st, "pp.parent")
				then := params(t, "pp.refused", func(p *store.InsertParams) { p.Payload = []byte(c.payload) })
				finishOne(t, st, claimOnly(t, st, "pp.parent", parent, longLease),
					store.FinishParams{Outcome: store.OutcomeSucceeded, Then: []store.InsertParams{then}})
				require.Equal(t, c.want, get(t, st, then.ID).PartitionKey)
			})
		}
	})
	t.Run("BatchChildrenIsolate", func(t *testing.T) {
		st := newStore(t)
		if !hasBatches(st) {
			t.Skipf("store %T keeps no batches", st)
		}
		setFlows(t, st, store.FlowConfig{Kind: "pp", Partition: store.PartitionSource{Metadata: "sub"}, PartitionConcurrency: 1})
		p := &store.BatchParams{ID: newID(t), Completion: params(t, "pp.done")}
		for _, sub := range []string{"down", "down", "down", "up", "up", "flaky"} {
			p.Children = append(p.Children, params(t, "pp", withMetadata(map[string]string{"sub": sub})))
		}
		insertBatch(t, st, p)
		res := claim(t, st, claimParams(100, longLease, "pp"))
		per := map[string]int{}
		for _, j := range res.Jobs {
			per[j.PartitionKey]++
		}
		require.Equal(t, map[string]int{"down": 1, "up": 1, "flaky": 1}, per, "one child per partition starts")
	})
}
