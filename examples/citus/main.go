// Command citus runs AX on a Citus cluster (distributed PostgreSQL): it
// distributes a fresh schema over the cluster's worker nodes, then two
// hosts (two Schedulers, as two processes would be) schedule orders in
// their own transactions and run them, and it prints how many jobs each
// worker node held and each host ran.
//
//	AX_CITUS_URL=postgres://postgres@coordinator:5432/app go run ./examples/citus
//
// The URL names the coordinator; the schema (-schema, a fresh one by
// default) is dropped at the end unless -keep is given.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

// Order is the payload of the "ship" kind.
type Order struct {
	ID int `json:"id"`
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "citus:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("citus", flag.ContinueOnError)
	url := fs.String("url", os.Getenv("AX_CITUS_URL"), "the Citus coordinator (default AX_CITUS_URL)")
	schema := fs.String("schema", "", "the schema to distribute (default: a fresh one, dropped at the end)")
	keep := fs.Bool("keep", false, "keep the schema")
	orders := fs.Int("orders", 200, "orders to ship")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("no coordinator: set AX_CITUS_URL or give -url")
	}
	if *schema == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		*schema = "ax_citus_example_" + hex.EncodeToString(b)
	}
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()

	// A deploy step, once: distribute the schema (ax migrate up --citus).
	if err := pgstore.MigrateCitus(ctx, pool, pgstore.WithSchema(*schema), pgstore.WithCitusShards(8)); err != nil {
		return err
	}
	if !*keep {
		defer pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{*schema}.Sanitize()+` CASCADE`) //nolint:errcheck
	}
	// The application's own table, on the coordinator.
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{*schema, "orders"}.Sanitize()+` (id int PRIMARY KEY)`); err != nil {
		return err
	}

	var (
		mu   sync.Mutex
		ran  = map[string]int{}
		done = make(chan struct{}, *orders)
	)
	var hosts []*ax.Scheduler
	for _, name := range []string{"host-a", "host-b"} {
		st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(*schema))
		if err != nil {
			return err
		}
		defer st.Close()
		s, err := ax.New(ax.Config{Store: st, Node: name, Workers: 20})
		if err != nil {
			return err
		}
		if err := ax.Handle(s, "ship", func(ctx context.Context, j *ax.Job, o Order) error {
			mu.Lock()
			ran[name]++
			mu.Unlock()
			done <- struct{}{}
			return nil
		}); err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
		defer s.Stop(context.Background()) //nolint:errcheck
		hosts = append(hosts, s)
	}

	// Each order and its job in one transaction of the coordinator: both
	// or neither (the Citus store commits it in two phases).
	for i := range *orders {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{*schema, "orders"}.Sanitize()+` VALUES ($1)`, i); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if _, err := hosts[i%2].ScheduleTx(ctx, tx, "ship", Order{ID: i}); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	timeout := time.After(time.Minute)
	for range *orders {
		select {
		case <-done:
		case <-timeout:
			return errors.New("not every order shipped within a minute")
		}
	}
	perNode, err := jobsPerNode(ctx, pool, *schema)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "%d orders shipped; jobs per worker node: %v; run by host-a %d, host-b %d\n",
		*orders, perNode, ran["host-a"], ran["host-b"])
	return nil
}

// jobsPerNode tells how many of the schema's jobs each worker node holds.
func jobsPerNode(ctx context.Context, pool *pgxpool.Pool, schema string) (map[string]int, error) {
	rows, _ := pool.Query(ctx, fmt.Sprintf(`WITH c AS MATERIALIZED (SELECT shard, count(*) AS n FROM %[1]s.jobs_all GROUP BY shard)
		SELECT n.nodename || ':' || n.nodeport, sum(c.n)::int
		FROM c
		JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('%[1]s.jobs', c.shard)
		JOIN pg_dist_node n ON n.groupid = p.groupid
		GROUP BY 1`, pgx.Identifier{schema}.Sanitize()))
	out := map[string]int{}
	var (
		node string
		n    int
	)
	_, err := pgx.ForEachRow(rows, []any{&node, &n}, func() error {
		out[node] = n
		return nil
	})
	return out, err
}
