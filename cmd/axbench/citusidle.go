package main

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

// runCitusIdle runs one Scheduler with three kinds and no jobs on a fresh
// schema of a Citus cluster (-citus), distributed over -citus-shards
// shards, and reports what it costs the cluster over -idle-for, after a
// second to settle: the transactions committed on the coordinator and on
// the worker nodes, and their CPU and this process's, per second. Every
// host pays this whenever it runs, work or not: claims, heartbeats, the
// rescue of expired leases and the archive, each on its interval.
func runCitusIdle(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"for": o.idleFor.String(), "kinds": len(idleKinds), "shards": o.citusShards})
	cl, err := openCitusCluster(ctx, o.citus)
	if err != nil {
		return nil, fmt.Errorf("citus-idle: %w", err)
	}
	defer cl.close()
	admin, nodes, nodePools, coord, clocks := cl.admin, cl.nodes, cl.nodePools, cl.coord, cl.clocks
	schema := "axbench_" + randomHex(6)
	if err := pgstore.MigrateCitus(ctx, admin, pgstore.WithSchema(schema), pgstore.WithCitusShards(o.citusShards)); err != nil {
		return nil, err
	}
	defer b.dropCitusSchema(admin, schema)
	pool, err := newPool(ctx, o.citus, o.conns, "axbench-citus")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	s, err := ax.New(ax.Config{Store: st})
	if err != nil {
		return nil, err
	}
	if err := startIdle(ctx, s); err != nil {
		return nil, err
	}
	defer stopScheduler(s) //nolint:errcheck // measured before
	// Transactions committed, on the coordinator and summed over the
	// worker nodes (their database has the coordinator's name).
	commits := func() (coordinator, workers int64, err error) {
		q := `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`
		if err := admin.QueryRow(ctx, q).Scan(&coordinator); err != nil {
			return 0, 0, err
		}
		for _, p := range nodePools {
			var n int64
			if err := p.QueryRow(ctx, q).Scan(&n); err != nil {
				return 0, 0, err
			}
			workers += n
		}
		return coordinator, workers, nil
	}
	cpu := func() (coordinator, workers time.Duration) {
		coordinator = serverCPU(coord)
		for _, c := range clocks {
			workers += serverCPU(c)
		}
		return coordinator, workers
	}
	c0, w0, err := commits()
	if err != nil {
		return nil, err
	}
	cc0, wc0 := cpu()
	client0, start := cpuTotal(), time.Now()
	b.progressf("citus-idle: measuring for %s", o.idleFor)
	if err := sleepCtx(ctx, o.idleFor); err != nil {
		return nil, err
	}
	client := cpuTotal() - client0
	cc1, wc1 := cpu()
	elapsed := time.Since(start).Seconds()
	c1, w1, err := commits()
	if err != nil {
		return nil, err
	}
	// The reads of the counters commit too: 1 + len(nodes) a read, two
	// reads, on the coordinator's and each node's own database.
	r.add("coordinator transactions per second", float64(c1-c0-2)/elapsed, "commits/s")
	r.add("worker nodes' transactions per second (summed)", float64(w1-w0-2*int64(len(nodes)))/elapsed, "commits/s")
	r.add("coordinator CPU per second", (cc1-cc0).Seconds()/elapsed, "s/s")
	r.add("worker nodes' CPU per second (summed)", (wc1-wc0).Seconds()/elapsed, "s/s")
	r.add("this process's CPU per second", client.Seconds()/elapsed, "s/s")
	r.Server = fmt.Sprintf("Citus cluster: coordinator %s, %d worker nodes (%s)", redact(o.citus), len(nodes), citusAddrs(nodes))
	r.note("transactions: xact_commit of the coordinator's database and of the nodes' (the same name), which PostgreSQL updates lazily (approximate over short windows), less the counters' own reads")
	r.note("one idle host (default ax.Config, three kinds registered, no jobs); the coordinator, %d worker nodes and this process share this machine's %d CPUs", len(nodes), b.machine.CPUs)
	return r, nil
}
