package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFlowRate checks rate limits: a claim takes at most the bucket's
// burst, NextRunAt is when the next token arrives (so a host waits rather
// than polls), held jobs keep their state and attempts, no window of the
// period holds more starts than the limit, and partitions have buckets of
// their own.
func testFlowRate(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	t.Run("BucketAndNextRunAt", func(t *testing.T) {
		st := newStore(t)
		rate := store.RateLimit{Limit: 4, Period: 400 * time.Millisecond} // burst 1, a token every 100ms
		setFlows(t, st, store.FlowConfig{Kind: "fr", Rate: rate})
		insertN(t, st, "fr", 3)
		first := claim(t, st, claimParams(100, longLease, "fr"))
		require.Len(t, first.Jobs, rate.Burst())
		require.False(t, first.NextRunAt.IsZero())
		next := first.NextRunAt
		requireTimeNear(t, first.Now.Add(rate.Interval()), next, storedTolerance, "the next token")
		f := flowOf(t, st, "fr")
		if f.Now.Before(next) {
			require.Zero(t, f.RateAvailable)
			requireTimeNear(t, next, f.RateNextAt, storedTolerance)
		}

		// Held, not failed.
		for _, j := range listKind(t, st, "fr", store.StateScheduled) {
			require.Zero(t, j.Attempt)
			require.Empty(t, j.Errors)
		}
		// Judged by the claim's own reading of the store's clock: a check
		// of the clock before the claim let a loaded machine (CI through
		// PgBouncer) reach NextRunAt in between.
		early := claim(t, st, claimParams(100, longLease, "fr"))
		if early.Now.Before(next) {
			require.Empty(t, early.Jobs, "no token before NextRunAt")
		}
		waitUntilStoreTime(t, st, next)
		late := claim(t, st, claimParams(100, longLease, "fr"))
		got := len(early.Jobs) + len(late.Jobs)
		// One token arrived at next, taken by whichever claim came after
		// it; a machine slow enough to let another interval pass before
		// the late claim (CI through PgBouncer at load 9) may see the
		// next token too, never more.
		require.GreaterOrEqual(t, got, 1, "a token arrived")
		require.LessOrEqual(t, got, 1+int(late.Now.Sub(next)/rate.Interval()), "tokens by the late claim's store time")
	})
	t.Run("SlidingWindow", func(t *testing.T) {
		st := newStore(t)
		rate := store.RateLimit{Limit: 100, Period: 500 * time.Millisecond} // burst 2
		setFlows(t, st, store.FlowConfig{Kind: "fr", Rate: rate})
		insertN(t, st, "fr", 1000)
		var (
			starts []time.Time
			due    time.Time // the token the last claim said is next
		)
		end := storeNow(t, st).Add(1500 * time.Millisecond)
		for {
			res := claim(t, st, claimParams(50, longLease, "fr"))
			for _, j := range res.Jobs {
				starts = append(starts, j.AttemptedAt)
			}
			// Not undershot: a claim at or after the time the store
			// said its next token comes gets a job. (A count of starts
			// over wall-clock time would say more about the machine's
			// load than about the store.)
			if !due.IsZero() && !res.Now.Before(due) {
				require.NotEmpty(t, res.Jobs, "a claim at %s, after the next token at %s, started nothing", res.Now, due)
			}
			if res.Now.After(end) {
				break
			}
			require.LessOrEqual(t, len(res.Jobs), rate.Burst())
			due = time.Time{}
			if !res.NextRunAt.IsZero() && res.NextRunAt.After(res.Now) {
				due = res.NextRunAt
				waitUntilStoreTime(t, st, due)
			}
		}
		slices.SortFunc(starts, time.Time.Compare)
		for i := range starts {
			// The starts in [starts[i], starts[i] + Period).
			n := 0
			for _, s := range starts[i:] {
				if !s.Before(starts[i].Add(rate.Period)) {
					break
				}
				n++
			}
			require.LessOrEqual(t, n, rate.Limit, "starts in the window from %s", starts[i])
		}
		require.GreaterOrEqual(t, len(starts), 10, "the loop ran through tokens")
	})
	t.Run("Partitions", func(t *testing.T) {
		st := newStore(t)
		rate := store.RateLimit{Limit: 1, Period: time.Hour}
		setFlows(t, st, store.FlowConfig{Kind: "fr", Partition: store.PartitionSource{Metadata: "t"}, PartitionRate: rate})
		for _, tenant := range []string{"a", "b"} {
			insertN(t, st, "fr", 2, withMetadata(map[string]string{"t": tenant}))
		}
		res := claim(t, st, claimParams(100, longLease, "fr"))
		require.Len(t, res.Jobs, 2, "one start per partition")
		require.NotEqual(t, res.Jobs[0].PartitionKey, res.Jobs[1].PartitionKey)
		requireTimeNear(t, res.Now.Add(rate.Interval()), res.NextRunAt, storedTolerance, "the partitions' next token")
	})
}

// listKind returns the jobs of kind in state (through the optional
// Lister; the test is skipped without one).
func listKind(t *testing.T, st store.Store, kind string, state store.State) []*store.JobRecord {
	t.Helper()
	l := as[store.Lister](t, st)
	jobs, err := l.List(t.Context(), &store.ListParams{Kind: kind, States: []store.State{state}, Limit: 1000})
	require.NoError(t, err)
	return jobs
}
