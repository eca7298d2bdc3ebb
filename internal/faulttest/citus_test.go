package faulttest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store/pgstore"
)

// newCitusCluster is newCluster on the Citus cluster: AX's schema "ax"
// of the coordinator's database, distributed over eight shards, the
// workers opening it with pgstore.NewCitus, the executions ledger a plain
// table of the coordinator. It holds the Citus tests' lock exclusively
// (no other test uses schema "ax" there, and the scenarios stop nodes).
func newCitusCluster(t *testing.T) *cluster {
	t.Helper()
	citustest.Exclusive(t)
	pool := citustest.Pool(t)
	ctx := context.Background()
	reset := func() {
		_, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS ax CASCADE; DROP TABLE IF EXISTS public.executions, public.downstream`)
		require.NoError(t, err)
	}
	reset()
	require.NoError(t, pgstore.MigrateCitus(ctx, pool, pgstore.WithCitusShards(8)))
	createLedger(t, pool)
	st, err := pgstore.NewCitus(ctx, pool)
	require.NoError(t, err)
	client, err := ax.New(ax.Config{Store: st})
	require.NoError(t, err)
	c := &cluster{t: t, dsn: citustest.URL(), pool: pool, ax: client, dir: t.TempDir(), args: []string{"-citus", "ax"}}
	t.Cleanup(reset)
	t.Cleanup(func() { _ = st.Close() })
	t.Cleanup(c.cleanup)
	return c
}

// TestCitusFaults runs hosts on the Citus store through the fault suite's
// black-box checks: a host killed (its jobs are rescued, none lost, and
// only the jobs it ran run again), a host stopped gracefully (its jobs
// handed back), a worker node stopped as if it crashed and started again
// mid-run, and the coordinator restarted mid-run (nothing lost, nothing
// run twice, no transaction left prepared).
func TestCitusFaults(t *testing.T) {
	t.Run("Kill", func(t *testing.T) {
		testKill(t, newCitusCluster(t), []string{"-lease", "2s", "-rescue", "500ms"}, 3*time.Second)
	})
	t.Run("Graceful", func(t *testing.T) { testGraceful(t, newCitusCluster(t)) })
	t.Run("WorkerNodeCrash", func(t *testing.T) {
		c := newCitusCluster(t)
		node := citustest.LocalNode(t, citustest.WorkerURLs(t)[1])
		testNodeRestart(t, c, func() {
			node.Stop(t, "immediate")
			time.Sleep(3 * time.Second)
			node.Start(t)
		})
	})
	t.Run("CoordinatorRestart", func(t *testing.T) {
		c := newCitusCluster(t)
		node := citustest.LocalNode(t, citustest.URL())
		testNodeRestart(t, c, func() {
			node.Stop(t, "fast")
			time.Sleep(2 * time.Second)
			node.Start(t)
		})
	})
}

// testNodeRestart runs jobs on two hosts of the Citus cluster c while
// fault stops and starts a node: every job ends succeeded, each ran to
// its end once (a job whose attempt the fault cut short runs again, its
// first run recorded without an outcome), and Citus's recovery leaves no
// transaction prepared on the workers.
func testNodeRestart(t *testing.T, c *cluster, fault func()) {
	for i := range 2 {
		c.start(fmt.Sprintf("node-fault-%d", i), "", "-workers", "30", "-lease", "3s", "-rescue", "500ms")
	}
	c.schedule(mixed(400, 8*time.Second, 300))
	c.waitFor("jobs to run", 20*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions WHERE outcome = 'ok'`) >= 50
	})
	fault()
	c.waitFor("the coordinator", time.Minute, func() bool { return c.pool.Ping(context.Background()) == nil })
	c.waitAllSucceeded(3 * time.Minute)
	tl := c.tally()
	require.Zero(t, tl.lost, "jobs lost")
	require.Equal(t, 400, tl.jobs)
	require.Zero(t, c.count(`SELECT count(*) FROM (SELECT job_id FROM executions WHERE outcome = 'ok'
		GROUP BY job_id HAVING count(*) > 1) d`), "a job ran to its end twice")
	var prepared int
	for _, w := range citustest.WorkerURLs(t) {
		p := citustest.PoolFor(t, w)
		require.NoError(t, p.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts`).Scan(&prepared))
		if prepared > 0 {
			_, err := c.pool.Exec(context.Background(), `SELECT recover_prepared_transactions()`)
			require.NoError(t, err)
			require.NoError(t, p.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts`).Scan(&prepared))
		}
		require.Zero(t, prepared, "transactions left prepared on %s", w)
	}
	figure(t, "%d jobs, %d executions, %d ran again after the fault cut them short, lost %d",
		tl.jobs, tl.executions, tl.duplicated, tl.lost)
	_ = syscall.SIGKILL
}
