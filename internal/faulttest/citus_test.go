package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// newCitusCluster is newCluster on the Citus cluster: AX's schema "ax"
// of the coordinator's database, distributed over eight shards, the
// workers opening it with pgstore.NewCitus. The ledger (executions) is a
// plain PostgreSQL database of its own (-ledger), with a copy of AX's
// schema into which mirror copies the Citus cluster's jobs and nodes
// before every check: the checks join the ledger to the jobs. It holds
// the Citus tests' lock exclusively (no other test uses schema "ax"
// there, and the scenarios stop nodes).
func newCitusCluster(t *testing.T) *cluster {
	t.Helper()
	skipUnderRace(t)
	citustest.Exclusive(t)
	citus := citustest.Pool(t)
	ctx := context.Background()
	reset := func() {
		_, err := citus.Exec(ctx, `DROP SCHEMA IF EXISTS ax CASCADE`)
		require.NoError(t, err)
	}
	reset()
	require.NoError(t, pgstore.MigrateCitus(ctx, citus, pgstore.WithCitusShards(8)))
	st, err := pgstore.NewCitus(ctx, citus)
	require.NoError(t, err)
	client, err := ax.New(ax.Config{Store: st})
	require.NoError(t, err)

	ledgerDSN := pgtest.DSN(t)
	ledger := pgtest.PoolFor(t, ledgerDSN)
	createLedger(t, ledger)
	mirror, err := pgstore.New(ctx, ledger) // AX's schema, for the copies
	require.NoError(t, err)
	require.NoError(t, mirror.Close())

	c := &cluster{t: t, dsn: citustest.URL(), pool: ledger, ax: client, dir: t.TempDir(),
		args: []string{"-citus", "ax", "-ledger", ledgerDSN}}
	c.mirror = func() { mirrorCitus(t, citus, ledger) }
	t.Cleanup(reset)
	t.Cleanup(func() { _ = st.Close() })
	t.Cleanup(c.cleanup)
	return c
}

// mirrorCitus replaces the jobs and nodes of the ledger's ax schema with
// the Citus cluster's (every job in ax.jobs, the history's too, without
// the shard column).
func mirrorCitus(t *testing.T, citus, ledger *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	tx, err := ledger.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, m := range []struct{ from, to string }{{"ax.jobs_all", "jobs"}, {"ax.nodes", "nodes"}} {
		rows, err := citus.Query(ctx, `SELECT * FROM `+m.from)
		require.NoError(t, err)
		var cols []string
		for _, f := range rows.FieldDescriptions() {
			if f.Name != "shard" {
				cols = append(cols, f.Name)
			}
		}
		var copied [][]any
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			var keep []any
			for i, f := range rows.FieldDescriptions() {
				if f.Name != "shard" {
					keep = append(keep, vals[i])
				}
			}
			copied = append(copied, keep)
		}
		require.NoError(t, rows.Err())
		_, err = tx.Exec(ctx, `DELETE FROM ax.`+m.to)
		require.NoError(t, err)
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"ax", m.to}, cols, pgx.CopyFromRows(copied))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
}

// TestCitusFaults runs hosts on the Citus store through the fault suite's
// black-box checks: a host killed (its jobs are rescued, none lost, and
// only the jobs it ran run again), a host stopped gracefully (its jobs
// handed back), a periodic schedule on three hosts (one job per tick,
// one host killed and one 30 s ahead), a worker node stopped as if it crashed and started again
// mid-run, and the coordinator restarted mid-run (nothing lost, nothing
// run twice, no transaction left prepared).
func TestCitusFaults(t *testing.T) {
	t.Run("Kill", func(t *testing.T) {
		// Leases of 4 s, not the 2 s of the PostgreSQL run: on Citus a
		// beat extends a host's leases with one statement per shard that
		// holds them, in turn on the lease connection, and a beat may
		// take half a lease (keepAliveTimeout). At 2 s, on a loaded
		// machine, beats took longer, surviving hosts lost leases and
		// their jobs ran twice: in a local CI run's exclusive step, and
		// under two CPU burners in 5 of 8 runs (7 of 8 before beats could
		// outlast the heartbeat interval); at 4 s, none in 10. The bound
		// is the lease plus a second, as there.
		testKill(t, newCitusCluster(t), []string{"-lease", "4s", "-rescue", "500ms"}, 5*time.Second)
	})
	t.Run("Graceful", func(t *testing.T) { testGraceful(t, newCitusCluster(t)) })
	t.Run("Periodic", func(t *testing.T) { testPeriodic(t, newCitusCluster(t)) })
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
// fault stops and starts a node for a few seconds, less than a lease:
// every job ends succeeded, none ran twice (the outcomes written during
// the outage wait and retry, the leases outlast it), and Citus's
// recovery leaves no transaction prepared on the workers.
func testNodeRestart(t *testing.T, c *cluster, fault func()) {
	for i := range 2 {
		// The default lease (10 s) outlasts the outage: a job whose
		// outcome waits for the node is not rescued meanwhile.
		c.start(fmt.Sprintf("node-fault-%d", i), "", "-workers", "30", "-rescue", "500ms")
	}
	c.schedule(mixed(400, 8*time.Second, 300))
	c.waitFor("jobs to run", 20*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions WHERE outcome = 'ok'`) >= 50
	})
	fault()
	c.waitFor("the coordinator", time.Minute, func() bool {
		_, err := c.ax.Admin().Count(context.Background(), ax.JobFilter{})
		return err == nil
	})
	c.waitAllSucceeded(3 * time.Minute)
	tl := c.tally()
	require.Zero(t, tl.lost, "jobs lost")
	require.Equal(t, 400, tl.jobs)
	require.Zero(t, tl.duplicated, "jobs that ran twice")
	var prepared int
	for _, w := range citustest.WorkerURLs(t) {
		p := citustest.PoolFor(t, w)
		require.NoError(t, p.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts`).Scan(&prepared))
		if prepared > 0 {
			_, err := citustest.Pool(t).Exec(context.Background(), `SELECT recover_prepared_transactions()`)
			require.NoError(t, err)
			require.NoError(t, p.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts`).Scan(&prepared))
		}
		require.Zero(t, prepared, "transactions left prepared on %s", w)
	}
	figure(t, "%d jobs, %d executions, %d ran twice, lost %d", tl.jobs, tl.executions, tl.duplicated, tl.lost)
}
