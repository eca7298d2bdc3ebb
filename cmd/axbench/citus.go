package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

// runCitus runs no-op jobs on a Citus cluster (-citus, its coordinator;
// the cluster on this machine, for the CPU figures): for each count of
// worker nodes holding shards (-citus-nodes) and each Config.Workers
// (-workers), n jobs are scheduled (ScheduleMany, 1,000 a call) into a
// fresh schema distributed over -citus-shards shards, then run by one
// Scheduler. It reports the insert and run rates, and the CPU per 1,000
// jobs of the coordinator, of the worker nodes and of this process, and
// how many of the jobs each node held. With fewer nodes than the cluster
// has, the others are told to take no shards while the schema is
// distributed (citus_set_node_property), and back afterwards.
func runCitus(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"n": o.n, "workers": o.workers, "shards": o.citusShards, "nodes": o.citusNodes})
	cl, err := openCitusCluster(ctx, o.citus)
	if err != nil {
		return nil, fmt.Errorf("citus: %w", err)
	}
	defer cl.close()
	admin, nodes, coord, clocks := cl.admin, cl.nodes, cl.coord, cl.clocks
	t := table{Title: "per worker nodes and Config.Workers", Columns: []string{"nodes", "workers", "insert jobs/s", "jobs/s",
		"coordinator CPU s/1k", "worker nodes CPU s/1k", "client CPU s/1k", "jobs per node"}}
	for _, k := range o.citusNodeList {
		if k < 1 || k > len(nodes) {
			return nil, fmt.Errorf("citus: %d worker nodes asked, the cluster has %d", k, len(nodes))
		}
		for _, w := range o.workerList {
			row, rate, err := b.citusRun(ctx, admin, nodes, k, w, coord, clocks)
			if err != nil {
				return nil, err
			}
			t.Rows = append(t.Rows, row)
			r.add(fmt.Sprintf("%d nodes, W=%d: jobs/s", k, w), rate, "jobs/s")
		}
	}
	r.Tables = append(r.Tables, t)
	r.Server = fmt.Sprintf("Citus cluster: coordinator %s, %d worker nodes (%s)", redact(o.citus), len(nodes), citusAddrs(nodes))
	r.note("the coordinator, %d worker nodes and this process share this machine's %d CPUs: figures for the record, not a target", len(nodes), b.machine.CPUs)
	return r, nil
}

// citusCluster is a Citus cluster on this machine as a scenario reads
// it: an admin pool on the coordinator, the worker nodes with a pool on
// each, and the CPU clocks of the coordinator and of the nodes.
type citusCluster struct {
	admin     *pgxpool.Pool
	nodes     []citusNode
	nodePools []*pgxpool.Pool
	coord     *serverClock
	clocks    []*serverClock
}

// openCitusCluster connects to the coordinator at url and to its worker
// nodes, which must all run on this machine (their CPU is read from
// /proc).
func openCitusCluster(ctx context.Context, url string) (*citusCluster, error) {
	if url == "" {
		return nil, fmt.Errorf("no coordinator: give -citus or set AX_CITUS_URL")
	}
	admin, err := newPool(ctx, url, 2, "axbench-admin")
	if err != nil {
		return nil, err
	}
	cl := &citusCluster{admin: admin}
	if err := cl.read(ctx); err != nil {
		cl.close()
		return nil, err
	}
	return cl, nil
}

func (cl *citusCluster) read(ctx context.Context) error {
	var err error
	if cl.nodes, err = citusWorkers(ctx, cl.admin); err != nil {
		return err
	}
	if cl.coord, err = newServerClockOf(ctx, cl.admin); err != nil {
		return fmt.Errorf("the coordinator must run on this machine: %w", err)
	}
	for _, n := range cl.nodes {
		p, err := newPool(ctx, n.url, 1, "axbench-clock")
		if err != nil {
			return err
		}
		cl.nodePools = append(cl.nodePools, p)
		c, err := newServerClockOf(ctx, p)
		if err != nil {
			return fmt.Errorf("worker node %s must run on this machine: %w", n.addr, err)
		}
		cl.clocks = append(cl.clocks, c)
	}
	return nil
}

func (cl *citusCluster) close() {
	for _, p := range cl.nodePools {
		p.Close()
	}
	cl.admin.Close()
}

// citusDropTries bounds the attempts to drop a scenario's schema: Citus
// cancels one of two DDL statements that take its metadata locks in
// opposite orders (a deadlock, 40P01), and another schema's drop or
// reset on the same cluster (a test run beside the benchmark) may be the
// other one.
const citusDropTries = 10

// dropCitusSchema drops a scenario's schema, retrying the drops Citus
// cancels as deadlocks, and says on stderr when it could not: the
// schema's distributed tables stay on the cluster until dropped by hand.
// Its loop is internal/deadlockretry's, written again: this module builds
// against the released ax, which has no such package.
func (b *bench) dropCitusSchema(admin *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for try := 1; try <= citusDropTries; try++ {
		_, err = admin.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			break
		}
		time.Sleep(time.Duration(try) * 50 * time.Millisecond)
	}
	if err != nil {
		b.progressf("could not drop schema %s (drop it by hand: DROP SCHEMA %s CASCADE): %v", schema, schema, err)
	}
}

// citusAddrs lists the nodes' addresses.
func citusAddrs(nodes []citusNode) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr
	}
	return strings.Join(addrs, ", ")
}

// citusNode is a worker node of the cluster.
type citusNode struct{ addr, url string }

// citusWorkers lists the cluster's worker nodes, with URLs made from the
// coordinator's (same user, database and options).
func citusWorkers(ctx context.Context, admin *pgxpool.Pool) ([]citusNode, error) {
	rows, _ := admin.Query(ctx, `SELECT nodename, nodeport FROM pg_dist_node WHERE groupid > 0 AND noderole = 'primary' ORDER BY nodeport`)
	var out []citusNode
	var (
		host string
		port int
	)
	_, err := pgx.ForEachRow(rows, []any{&host, &port}, func() error {
		cc := admin.Config().ConnConfig
		out = append(out, citusNode{addr: fmt.Sprintf("%s:%d", host, port),
			url: fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cc.User, host, port, cc.Database)})
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("citus: the cluster has no worker node")
	}
	return out, err
}

// citusRun is one row of runCitus: k nodes hold the shards, w workers.
func (b *bench) citusRun(ctx context.Context, admin *pgxpool.Pool, nodes []citusNode, k, w int, coord *serverClock,
	clocks []*serverClock) (row []string, rate float64, err error) {
	o := b.opt
	schema := "axbench_" + randomHex(6)
	setShards := func(n citusNode, on bool) error {
		host, port, _ := strings.Cut(n.addr, ":")
		_, err := admin.Exec(ctx, `SELECT citus_set_node_property($1, $2::int, 'shouldhaveshards', $3)`, host, port, on)
		return err
	}
	for _, n := range nodes[k:] {
		if err := setShards(n, false); err != nil {
			return nil, 0, err
		}
	}
	err = pgstore.MigrateCitus(ctx, admin, pgstore.WithSchema(schema), pgstore.WithCitusShards(o.citusShards))
	for _, n := range nodes[k:] {
		if e := setShards(n, true); e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, 0, err
	}
	defer b.dropCitusSchema(admin, schema)
	pool, err := newPool(ctx, o.citus, o.conns, "axbench-citus", func(cfg *pgxpool.Config) {
		if o.citusCachedConns > 0 {
			cfg.ConnConfig.RuntimeParams["citus.max_cached_conns_per_worker"] = fmt.Sprint(o.citusCachedConns)
		}
	})
	if err != nil {
		return nil, 0, err
	}
	defer pool.Close()
	st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	s, err := ax.New(ax.Config{Store: st, Workers: w})
	if err != nil {
		return nil, 0, err
	}
	c := newCounter(o.n)
	if err := s.Handle(noopKind, ax.HandlerFunc(func(context.Context, *ax.Job) error {
		c.inc()
		return nil
	})); err != nil {
		return nil, 0, err
	}
	took, err := scheduleNoops(ctx, s, o.n, 1000)
	if err != nil {
		return nil, 0, err
	}
	b.progressf("citus: %d nodes, W=%d: %d jobs inserted in %s", k, w, o.n, took.Round(time.Millisecond))
	coord0 := serverCPU(coord)
	nodes0 := make([]time.Duration, len(clocks))
	for i, cl := range clocks {
		nodes0[i] = serverCPU(cl)
	}
	cpu0, start := cpuTotal(), time.Now()
	if err := s.Start(ctx); err != nil {
		return nil, 0, err
	}
	waitErr := b.wait(ctx, fmt.Sprintf("citus %d nodes W=%d", k, w), c, 10*time.Minute)
	stopErr := stopScheduler(s)
	elapsed := time.Since(start)
	if waitErr != nil {
		return nil, 0, waitErr
	}
	if stopErr != nil {
		return nil, 0, stopErr
	}
	per1k := func(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()*1000/float64(o.n)) }
	var workersCPU time.Duration
	for i, cl := range clocks {
		workersCPU += serverCPU(cl) - nodes0[i]
	}
	perNode, err := citusJobsPerNode(ctx, admin, schema)
	if err != nil {
		return nil, 0, err
	}
	rate = float64(o.n) / elapsed.Seconds()
	return []string{fmt.Sprint(k), fmt.Sprint(w), fmt.Sprintf("%.0f", float64(o.n)/took.Seconds()),
		fmt.Sprintf("%.0f", rate), per1k(serverCPU(coord) - coord0), per1k(workersCPU),
		per1k(cpuTotal() - cpu0), perNode}, rate, nil
}

// citusJobsPerNode tells how many of the schema's jobs each worker node
// holds.
func citusJobsPerNode(ctx context.Context, admin *pgxpool.Pool, schema string) (string, error) {
	rows, _ := admin.Query(ctx, fmt.Sprintf(`WITH c AS MATERIALIZED (SELECT shard, count(*) AS n FROM %[1]s.jobs_all GROUP BY shard)
		SELECT n.nodeport, sum(c.n)::bigint
		FROM c
		JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('%[1]s.jobs', c.shard)
		JOIN pg_dist_node n ON n.groupid = p.groupid
		GROUP BY 1 ORDER BY 1`, schema))
	var (
		parts []string
		port  int
		n     int64
	)
	_, err := pgx.ForEachRow(rows, []any{&port, &n}, func() error {
		parts = append(parts, fmt.Sprintf(":%d %d", port, n))
		return nil
	})
	return strings.Join(parts, ", "), err
}
