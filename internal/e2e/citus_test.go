package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store/pgstore"
)

// TestCitusTwoHostsRunEveryJobOnce: two hosts, each with its own Citus
// store on one distributed schema of eight shards, run 600 jobs
// (immediate, scheduled a little ahead, retried once, some with unique
// keys given twice) and every job runs to its end exactly once per
// attempt, on either host; the jobs lie on both worker nodes, whose
// counts the test prints.
func TestCitusTwoHostsRunEveryJobOnce(t *testing.T) {
	t.Parallel() // beside TestHeartbeatsNeverStarve, which mostly waits
	pool, schema := citustest.Schema(t)
	ctx := t.Context()
	require.NoError(t, pgstore.MigrateCitus(ctx, pool, pgstore.WithSchema(schema), pgstore.WithCitusShards(8)))

	var (
		mu    sync.Mutex
		runs  = map[uuid.UUID]int{}
		hosts = map[string]int{}
		done  = make(chan struct{}, 1000)
	)
	handler := func(host string) ax.HandlerFunc {
		return func(_ context.Context, j *ax.Job) error {
			mu.Lock()
			runs[j.ID]++
			hosts[host]++
			first := runs[j.ID] == 1
			mu.Unlock()
			if j.Kind == "flaky" && first {
				return fmt.Errorf("first attempt fails")
			}
			done <- struct{}{}
			return nil
		}
	}
	var scheds []*ax.Scheduler
	for _, host := range []string{"a", "b"} {
		st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), Node: host, Workers: 20,
			PollInterval: 200 * time.Millisecond, RetryPolicy: ax.RetryPolicyFunc(func(int, error) time.Duration { return 50 * time.Millisecond })})
		require.NoError(t, err)
		for _, kind := range []string{"now", "soon", "flaky", "keyed"} {
			require.NoError(t, s.Handle(kind, handler(host)))
		}
		require.NoError(t, s.Start(ctx))
		scheds = append(scheds, s)
	}
	t.Cleanup(func() {
		for _, s := range scheds {
			require.NoError(t, s.Stop(context.Background()))
		}
	})

	want := 0
	for i := range 150 {
		s := scheds[i%2]
		for _, kind := range []string{"now", "soon", "flaky"} {
			var opts []ax.ScheduleOption
			if kind == "soon" {
				opts = append(opts, ax.In(time.Duration(i%20)*10*time.Millisecond))
			}
			_, err := s.Schedule(ctx, kind, map[string]int{"i": i}, opts...)
			require.NoError(t, err)
			want++
		}
		// The same key from both hosts: one job, even when the first has
		// already run to its end (the key is kept while it is finished).
		for _, s := range scheds {
			_, err := s.Schedule(ctx, "keyed", nil, ax.UniqueKey(fmt.Sprintf("k%d", i)), ax.UniqueWhileFinished())
			require.NoError(t, err)
		}
		want++
	}
	deadline := time.After(2 * time.Minute)
	for range want {
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("not every job ran within 2 minutes")
		}
	}
	// Let any duplicate show itself.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, want)
	for id, n := range runs {
		rec, err := scheds[0].Get(ctx, id)
		require.NoError(t, err)
		wantRuns := 1
		if rec.Kind == "flaky" {
			wantRuns = 2
		}
		require.Equal(t, wantRuns, n, "job %s (%s) ran %d times", id, rec.Kind, n)
		require.Equal(t, ax.StateSucceeded, rec.State)
	}
	t.Logf("attempts per host: %v", hosts)

	rows, err := pool.Query(ctx, fmt.Sprintf(`WITH c AS MATERIALIZED (SELECT shard, count(*) AS n FROM %[1]s.jobs_all GROUP BY shard)
		SELECT n.nodename || ':' || n.nodeport, sum(c.n)::int
		FROM c
		JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('%[1]s.jobs', c.shard)
		JOIN pg_dist_node n ON n.groupid = p.groupid
		GROUP BY 1 ORDER BY 1`, schema))
	require.NoError(t, err)
	perNode := map[string]int{}
	for rows.Next() {
		var node string
		var n int
		require.NoError(t, rows.Scan(&node, &n))
		perNode[node] = n
	}
	require.NoError(t, rows.Err())
	t.Logf("jobs per worker node: %v", perNode)
	require.Len(t, perNode, len(citustest.WorkerURLs(t)), "jobs on every worker node")
}
