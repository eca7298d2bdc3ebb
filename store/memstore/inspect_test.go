package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// largeStore returns a store with n jobs of kind "big": every tenth is
// paused, the rest not yet due.
func largeStore(t testing.TB, n int) *memstore.Store {
	t.Helper()
	ctx := context.Background()
	st := memstore.New()
	var paused []uuid.UUID
	for i := 0; i < n; i += 1000 {
		ps := make([]store.InsertParams, 1000)
		for k := range ps {
			ps[k] = store.InsertParams{
				ID: uuid.Must(uuid.NewV7()), Kind: "big", Priority: store.PriorityNormal,
				MaxAttempts: 1, Delay: time.Hour,
				Metadata: map[string]string{"shard": []string{"a", "b"}[k%2]},
			}
			if k%10 == 0 {
				paused = append(paused, ps[k].ID)
			}
		}
		_, err := st.Insert(ctx, ps)
		require.NoError(t, err)
	}
	for _, id := range paused {
		_, err := st.Control(ctx, id, store.OpPause)
		require.NoError(t, err)
	}
	return st
}

// TestOperatorAtScale runs the operator calls over 100,000 jobs: paging
// through a filtered selection, counting with and without the counters,
// and draining a bulk change in bounded batches, as the core's bulk
// methods do.
func TestOperatorAtScale(t *testing.T) {
	const n = 100_000
	ctx := context.Background()
	st := largeStore(t, n)

	paused := store.JobFilter{States: []store.State{store.StatePaused}}
	count, err := st.CountMatching(ctx, &paused)
	require.NoError(t, err)
	require.Equal(t, int64(n/10), count)
	shardA := store.JobFilter{Metadata: map[string]string{"shard": "a"}}
	count, err = st.CountMatching(ctx, &shardA)
	require.NoError(t, err)
	require.Equal(t, int64(n/2), count)

	seen, after := 0, uuid.Nil
	for {
		page, err := st.ListJobs(ctx, &store.ListJobsParams{Filter: paused, After: after, Limit: store.MaxListLimit})
		require.NoError(t, err)
		seen += len(page.Jobs)
		if page.Next == uuid.Nil {
			break
		}
		after = page.Next
	}
	require.Equal(t, n/10, seen)

	total := 0
	for {
		changed, err := st.Bulk(ctx, &store.BulkParams{Op: store.BulkRunNow, Filter: store.JobFilter{Kinds: []string{"big"}}, Limit: 1000})
		require.NoError(t, err)
		total += changed
		if changed < 1000 {
			break
		}
	}
	require.Equal(t, n, total, "every job made due once")
}

// BenchmarkListFiltered lists one page of a selective filter over
// 100,000 jobs (a walk of the whole ID index).
func BenchmarkListFiltered(b *testing.B) {
	st := largeStore(b, 100_000)
	p := &store.ListJobsParams{Filter: store.JobFilter{States: []store.State{store.StatePaused}, Metadata: map[string]string{"shard": "b"}}, Limit: 100}
	for b.Loop() {
		if _, err := st.ListJobs(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
}
