package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testAgingTakesInClaimOrder checks which jobs claims with priority aging
// (ClaimParams.AgeAfter) take when their limit leaves some behind: claim
// after claim of one kind, the jobs taken are the next ones in claim order
// (aged first, oldest first whatever their priority, then by priority and
// run_at), whether or not aging puts a lower priority's job before a
// higher one's. testFlowAging checks the order within one claim; a store
// may choose the rows of a claim of one kind differently from a claim of
// several (pgstore's claim of one kind reads each priority's range in
// turn, and gives way to its open claim when aging mixes the ranges).
func testAgingTakesInClaimOrder(t *testing.T, newStore NewStoreFunc) {
	probe := newStore(t)
	as[store.FlowStore](t, probe)
	type job struct {
		name string
		prio int
		age  time.Duration // how long before the store's now it fell due
	}
	const ageAfter = 10 * time.Minute
	cases := []struct {
		name  string
		jobs  []job
		limit int
		want  []string
	}{
		{
			name: "aged low before fresh high",
			jobs: []job{
				{"oldLow", store.PriorityLow, 50 * time.Minute},
				{"oldHigh", store.PriorityHigh, 40 * time.Minute},
				{"oldNormal", store.PriorityNormal, 30 * time.Minute},
				{"high", store.PriorityHigh, time.Minute},
				{"normal", store.PriorityNormal, 2 * time.Minute},
				{"low", store.PriorityLow, 3 * time.Minute},
				{"newHigh", store.PriorityHigh, 5 * time.Second},
			},
			limit: 2,
			want:  []string{"oldLow", "oldHigh", "oldNormal", "high", "newHigh", "normal", "low"},
		},
		{
			name: "aged normal before due high",
			jobs: []job{
				{"high", store.PriorityHigh, time.Minute},
				{"oldNormal", store.PriorityNormal, 20 * time.Minute},
				{"normal", store.PriorityNormal, 2 * time.Minute},
			},
			limit: 1,
			want:  []string{"oldNormal", "high", "normal"},
		},
		{
			name: "aged jobs of the first priority due",
			jobs: []job{
				{"oldNormal", store.PriorityNormal, 30 * time.Minute},
				{"normal", store.PriorityNormal, time.Minute},
				{"low", store.PriorityLow, 2 * time.Minute},
				{"lessOldNormal", store.PriorityNormal, 20 * time.Minute},
			},
			limit: 1,
			want:  []string{"oldNormal", "lessOldNormal", "normal", "low"},
		},
		{
			name: "nothing aged",
			jobs: []job{
				{"low", store.PriorityLow, 3 * time.Minute},
				{"normal", store.PriorityNormal, 2 * time.Minute},
				{"high", store.PriorityHigh, time.Minute},
			},
			limit: 2,
			want:  []string{"high", "normal", "low"},
		},
	}
	// Each case claims by Claim, and, where the store has FinishClaim,
	// also by FinishClaim calls that end the jobs the call before took
	// (pgstore makes that claim in the finish's round trip).
	_, riders := probe.(store.FinishClaimer)
	ways := []string{"Claim"}
	if riders {
		ways = append(ways, "FinishClaim")
	}
	for _, c := range cases {
		for _, way := range ways {
			t.Run(c.name+"/"+way, func(t *testing.T) {
				st := newStore(t)
				now := storeNow(t, st)
				names := map[uuid.UUID]string{}
				for _, j := range c.jobs {
					id := insertOne(t, st, "age", withPriority(j.prio), withRunAt(now.Add(-j.age)))
					names[id] = j.name
				}
				p := claimParams(c.limit, longLease, "age")
				p.AgeAfter = ageAfter
				var (
					got  []string
					prev *store.ClaimResult
				)
				for range len(c.jobs) {
					res := claimAged(t, st, way, p, prev)
					if len(res.Jobs) == 0 {
						break
					}
					require.LessOrEqual(t, len(res.Jobs), c.limit)
					for _, id := range claimIDs(res) {
						got = append(got, names[id])
					}
					prev = res
				}
				require.Equal(t, c.want, got, "jobs in the order the claims took them")
			})
		}
	}
}

// claimAged claims with p by Claim, or by FinishClaim ending the jobs of
// prev (the claim before, nil for none) as succeeded.
func claimAged(t *testing.T, st store.Store, way string, p *store.ClaimParams, prev *store.ClaimResult) *store.ClaimResult {
	t.Helper()
	if way == "Claim" || prev == nil {
		return claim(t, st, p)
	}
	var ends []store.FinishParams
	for _, j := range prev.Jobs {
		ends = append(ends, store.FinishParams{Lease: lease(j), Outcome: store.OutcomeSucceeded})
	}
	fr, res, err := st.(store.FinishClaimer).FinishClaim(t.Context(), ends, p)
	require.NoError(t, err)
	for i, ok := range fr.OK {
		require.True(t, ok, "outcome %d not applied", i)
	}
	return res
}
