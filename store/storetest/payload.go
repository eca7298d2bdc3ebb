package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// exactPayloads are valid JSON texts that a store normalizing JSON (key
// order, whitespace, duplicate keys, number spelling, escapes) would not
// give back as written.
var exactPayloads = []struct {
	name string
	text string
}{
	{"SpacesAndKeyOrder", `{"b":1,  "a":[2, 3]}`},
	{"OuterWhitespace", " \n\t{\"a\": 1}\r\n "},
	{"DuplicateKeys", `{"a":1,"a":2}`},
	{"NumbersAsWritten", `[1.50, 1E+2, -0, 0.1e-3, 12345678901234567890123456789]`},
	{"Escapes", `{"s":"\u00e9\n\/\"","nul":"\u0000"}`},
	{"RawUnicode", `"héllo ✓ 日本 😀"`},
	{"Scalar", `42`},
	{"Null", `null`},
	{"Nested", `{"z":{"y":{"x":[{},[],"",false,true,null]}}}`},
}

// testPayload checks that payloads are kept byte for byte as given, on
// every path that writes or reads them.
func testPayload(t *testing.T, newStore NewStoreFunc) {
	// Each path inserts every payload and returns the jobs as it read them.
	paths := []struct {
		name string
		run  func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord
	}{
		{"InsertOneGet", func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
			for _, p := range ps {
				insert(t, st, p)
			}
			return getAll(t, st, ps)
		}},
		{"InsertManyGet", func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
			insert(t, st, ps...)
			return getAll(t, st, ps)
		}},
		{"InsertManyKeyedGet", func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
			for i := range ps {
				ps[i].UniqueKey = "payload:" + ps[i].ID.String()
			}
			insert(t, st, ps...)
			return getAll(t, st, ps)
		}},
		{"Claim", func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
			insert(t, st, ps...)
			return claimAll(t, st, len(ps))
		}},
		{"ClaimAfterRetry", func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
			insert(t, st, ps...)
			for _, j := range claimAll(t, st, len(ps)) {
				finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Error: "e"})
			}
			return claimAll(t, st, len(ps))
		}},
		{"List", func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
			l := as[store.Lister](t, st)
			insert(t, st, ps...)
			jobs, err := l.List(t.Context(), &store.ListParams{Kind: "payload", Limit: len(ps) + 1})
			require.NoError(t, err)
			return byID(jobs)
		}},
		{"FirePeriodic", func(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
			per := as[store.PeriodicStore](t, st)
			base := storeNow(t, st).Truncate(time.Second).Add(-time.Hour)
			fp := &store.FirePeriodicParams{Name: "payload", Spec: "@every 1s"}
			for i := range ps {
				fp.Ticks = append(fp.Ticks, store.PeriodicTick{At: base.Add(time.Duration(i) * time.Second), Job: &ps[i]})
			}
			_, err := per.FirePeriodic(t.Context(), fp)
			require.NoError(t, err)
			return getAll(t, st, ps)
		}},
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			st := newStore(t)
			ps := make([]store.InsertParams, len(exactPayloads))
			for i, c := range exactPayloads {
				ps[i] = params(t, "payload")
				ps[i].Payload = []byte(c.text)
			}
			got := path.run(t, st, ps)
			require.Len(t, got, len(ps))
			for i, c := range exactPayloads {
				require.Equal(t, c.text, string(got[ps[i].ID].Payload), "%s: payload not kept byte for byte", c.name)
			}
		})
	}

	t.Run("NilIsNull", func(t *testing.T) {
		st := newStore(t)
		id := insertOne(t, st, "payload", func(p *store.InsertParams) { p.Payload = nil })
		require.Equal(t, "null", string(get(t, st, id).Payload))
		j := claimOnly(t, st, "payload", id, longLease)
		require.Equal(t, "null", string(j.Payload))
	})
}

// getAll reads the jobs of ps.
func getAll(t *testing.T, st store.Store, ps []store.InsertParams) map[uuid.UUID]*store.JobRecord {
	t.Helper()
	out := make(map[uuid.UUID]*store.JobRecord, len(ps))
	for _, p := range ps {
		out[p.ID] = get(t, st, p.ID)
	}
	return out
}

// claimAll claims the n due jobs of kind "payload".
func claimAll(t *testing.T, st store.Store, n int) map[uuid.UUID]*store.JobRecord {
	t.Helper()
	res := claim(t, st, claimParams(n+1, longLease, "payload"))
	require.Len(t, res.Jobs, n)
	return byID(res.Jobs)
}

// byID indexes jobs by ID.
func byID(jobs []*store.JobRecord) map[uuid.UUID]*store.JobRecord {
	out := make(map[uuid.UUID]*store.JobRecord, len(jobs))
	for _, j := range jobs {
		out[j.ID] = j
	}
	return out
}
