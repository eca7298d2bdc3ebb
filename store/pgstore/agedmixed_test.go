package pgstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestAgedMixedKindClaimsOpen: while priority aging mixes a kind's ranges
// (Normal jobs aged behind due High ones), a claim of one kind finds it,
// takes nothing and gives way to the open claim; the kind's next claims
// within the hold make the open claim at once (no claim of one kind runs;
// a batchTracer counts them), and every claim, by Claim or by FinishClaim,
// takes the next job in claim order. With a hold of a nanosecond every
// claim tries the claim of one kind first, which runs FinishClaim's own
// fallback after its outcomes committed.
func TestAgedMixedKindClaimsOpen(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		hold     time.Duration
		finish   bool // claim by FinishClaim, ending the job the claim before took
		oneKinds int  // claims of one kind run by the 4 claims
	}{
		{"Claim", 0, false, 1},
		{"FinishClaim", 0, true, 1},
		{"Claim, no hold", time.Nanosecond, false, 4},
		{"FinishClaim, no hold", time.Nanosecond, true, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			s, _, tracer := newTracedStore(t)
			s.SetAgedMixedHold(c.hold)

			now, err := s.Now(ctx)
			require.NoError(t, err)
			names := map[uuid.UUID]string{}
			for _, j := range []struct {
				name string
				prio int
				age  time.Duration
			}{
				{"high", store.PriorityHigh, time.Minute},
				{"oldNormal", store.PriorityNormal, 30 * time.Minute},
				{"lessOldNormal", store.PriorityNormal, 20 * time.Minute},
				{"newHigh", store.PriorityHigh, 5 * time.Second},
			} {
				p := job("mix")
				p.Priority, p.RunAt = j.prio, now.Add(-j.age)
				_, err := s.Insert(ctx, []store.InsertParams{p})
				require.NoError(t, err)
				names[p.ID] = j.name
			}
			p := &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: "mix", Limit: 1}}, Limit: 1,
				LeaseDuration: time.Hour, AgeAfter: 10 * time.Minute}
			var (
				got  []string
				prev []*store.JobRecord
			)
			for range 4 {
				var res *store.ClaimResult
				if c.finish && prev != nil {
					var fr *store.FinishResult
					fr, res, err = s.FinishClaim(ctx, []store.FinishParams{{Lease: leaseOf(prev[0]), Outcome: store.OutcomeSucceeded}}, p)
					require.NoError(t, err)
					require.Equal(t, []bool{true}, fr.OK)
				} else {
					res, err = s.Claim(ctx, p)
					require.NoError(t, err)
				}
				require.Len(t, res.Jobs, 1)
				got = append(got, names[res.Jobs[0].ID])
				prev = res.Jobs
			}
			require.Equal(t, []string{"oldNormal", "lessOldNormal", "high", "newHigh"}, got, "jobs in claim order")
			require.Equal(t, c.oneKinds, tracer.together(s.ClaimOneKindSQL(), s.ClaimOneKindSQL()), "claims of one kind run")
		})
	}
}
