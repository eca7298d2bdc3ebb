package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store/pgstore"
)

// registerPooler adds -via-pgbouncer.
func registerPooler(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.viaPgBouncer, "via-pgbouncer", "", "`host:port` of a PgBouncer in pool_mode = transaction in front of the -db server "+
		"(every database forwarded, e.g. \"* = host=127.0.0.1 port=5432\"): each scenario runs twice, direct and as NAME/pgbouncer with its pools "+
		"through it (pgx.QueryExecModeCacheDescribe, pgstore.WithTransactionPooler, the listener direct)")
}

// withPoolerRuns returns todo with, when via is set, each scenario
// followed by its run through the PgBouncer at via, named NAME/pgbouncer,
// so that one run compares both on the same machine and load.
func withPoolerRuns(todo []scenario, via string) []scenario {
	if via == "" {
		return todo
	}
	var out []scenario
	for _, sc := range todo {
		pooled := sc
		pooled.name = sc.name + "/pgbouncer"
		pooled.about = sc.about + ", through PgBouncer"
		pooled.run = func(ctx context.Context, b *bench) (*result, error) {
			b.via = via
			defer func() { b.via = "" }()
			return sc.run(ctx, b)
		}
		out = append(out, sc, pooled)
	}
	return out
}

// usePooler replaces d's store (migrated on the direct pool) with one
// whose pool goes through the PgBouncer at via; the direct pool stays for
// the scenario's own statements (truncates, server counters).
func (d *benchDB) usePooler(ctx context.Context, via string, conns int) error {
	d.via = via
	pool, err := d.sessionPool(ctx, conns, "axbench")
	if err != nil {
		return err
	}
	st, err := pgstore.New(ctx, pool, d.storeOptions()...)
	if err != nil {
		pool.Close()
		return err
	}
	_ = d.store.Close()
	d.store, d.viaPool = st, pool
	return nil
}

// sessionPool opens a pool on d's database, through the PgBouncer when
// the scenario runs through one.
func (d *benchDB) sessionPool(ctx context.Context, conns int, app string, edit ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	if d.via == "" {
		return newPool(ctx, d.dsn, conns, app, edit...)
	}
	u, err := url.Parse(d.dsn)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("-via-pgbouncer needs -db as a URL")
	}
	u.Host = d.via
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, err
	}
	if conns > 0 {
		cfg.MaxConns = int32(conns)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	// What pgstore.WithTransactionPooler requires: the unnamed statement,
	// described once per connection.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	for _, e := range edit {
		e(cfg)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// storeOptions are the pgstore options of the scenario's stores.
func (d *benchDB) storeOptions() []pgstore.Option {
	var opts []pgstore.Option
	if d.asyncCommits {
		opts = append(opts, pgstore.WithAsyncClaimsAndOutcomes())
	}
	if d.earlyStart {
		opts = append(opts, pgstore.WithEarlyDirectStart())
	}
	if d.via == "" {
		return opts
	}
	return append(opts, pgstore.WithoutMigrate(), pgstore.WithTransactionPooler(), pgstore.WithListenerConnString(d.dsn))
}

// settlePooled stands in for settle through PgBouncer, whose server
// connections outlive the session's pool: it cannot wait for them to exit
// and report their counters, so it waits a second (PostgreSQL 15 flushes
// an idle backend's counters within one to ten), and the run's server
// costs (WAL, commits per job) may miss the last of them.
func (d *benchDB) settlePooled(ctx context.Context) error {
	d.pool.Reset()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
		return nil
	}
}
