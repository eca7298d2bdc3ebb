package pgstore

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
)

// WithTransactionPooler declares that the pool goes through a pooler in
// transaction mode (PgBouncer's pool_mode = transaction, and poolers that
// work like it), which gives each transaction, or each statement outside
// one, whichever server connection is free. Two things do not survive
// that, and this option takes care of both:
//
//   - Named prepared statements, which pgx's default query execution mode
//     (pgx.QueryExecModeCacheStatement) prepares once per connection and
//     reuses: on another server connection they do not exist (prepared
//     statement "stmtcache_..." does not exist), or another client's of
//     the same name does (... already exists), and PgBouncer before 1.21
//     does not carry them over. Build the pool with
//
//     cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
//
//     New refuses any other mode (store.ErrInvalidParams). CacheDescribe
//     sends each statement through the unnamed statement, parsed, bound and
//     executed in one round trip, with the parameter and result types the
//     server described the first time the connection ran it (one extra
//     round trip per statement and connection), in the binary format, as
//     the default mode does. QueryExecModeExec and
//     QueryExecModeSimpleProtocol, which also keep to one round trip, New
//     refuses with or without this option: they type parameters from their
//     Go values and cannot send pgstore's IDs and payloads
//     (checkTypedMode). DescribeExec describes and executes in two round
//     trips, which the pooler may send to two server connections. The cost: every execution is parsed and
//     planned again, where a prepared statement is planned once per
//     connection (or on its first executions); docs/deployments.md has
//     the measured throughput and lag. The claims still ask for their
//     generic plans (plan_cache_mode, for their transaction), but an
//     unnamed statement's plan is made again at every execution: the
//     planning a direct pool saves (1.3–1.7 ms of server time per plain
//     claim, claimPlanSQL) is paid on every claim. The other statements
//     get custom plans, as they mostly do on a direct pool. A
//     description cached before a migration
//     changed a statement's types fails that statement once on each
//     connection (pgx then forgets it).
//
//   - LISTEN, which belongs to a session: through such a pooler the LISTEN
//     lands on a server connection that then serves other clients, and
//     notifications never reach the listener, while its claim cursors
//     (which rely on hearing every notification) would be on. Give the
//     listener a direct connection to the server with
//     WithListenerConnString. Without one the Store does not LISTEN at all:
//     Subscribe returns at once and the Store sends no wake-ups, so the
//     hosts poll (ax.Config.PollInterval, 1s by default): a job scheduled
//     by another host starts up to a poll interval later, and claims scan
//     each range from its start instead of from a cursor.
//
// Nothing else pgstore does keeps session state (the package doc's
// "Poolers" section lists what it sets and locks, all of it for one
// transaction). pgstore opens two connections outside the pool, the
// listener's and the lease connection (see the package doc's
// "Connections"); the lease connection goes through the pooler with the
// pool's settings, this query execution mode included.
func WithTransactionPooler() Option {
	return optionFunc(func(o *options) { o.txPooler = true })
}

// checkPoolerMode refuses a pool whose query execution mode cannot send
// pgstore's parameters (checkTypedMode) and, with WithTransactionPooler,
// one whose mode needs a statement to stay on one server connection
// across round trips.
func checkPoolerMode(pool *pgxpool.Pool, o *options) error {
	if err := checkTypedMode(pool, "New"); err != nil {
		return err
	}
	if !o.txPooler {
		return nil
	}
	if mode := pool.Config().ConnConfig.DefaultQueryExecMode; mode != pgx.QueryExecModeCacheDescribe {
		return fmt.Errorf("pgstore: WithTransactionPooler: the pool's DefaultQueryExecMode is %q; set cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe (see WithTransactionPooler): %w",
			mode, store.ErrInvalidParams)
	}
	return nil
}

// checkTypedMode refuses (store.ErrInvalidParams, before anything is
// sent) a pool in QueryExecModeExec or QueryExecModeSimpleProtocol. In
// those modes pgx names each parameter's type from its Go value, not from
// the server's description of the statement: a []byte payload goes as
// bytea into a json column ("invalid input syntax for type json"), and an
// ID, sent as [16]byte, has no type pgx can name ("unable to encode
// [16]uint8 into text format for unknown type"). Every statement that
// inserts, claims or ends a job fails there, so the Store would accept
// the pool and then fail on every job; it refuses it at New instead, as
// a missing capability should be refused. who is the constructor, for
// the error.
func checkTypedMode(pool *pgxpool.Pool, who string) error {
	switch mode := pool.Config().ConnConfig.DefaultQueryExecMode; mode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		return fmt.Errorf("pgstore: %s: the pool's DefaultQueryExecMode is %q, in which pgx types parameters by their Go values and cannot send pgstore's IDs and payloads; use pgx's default mode, or pgx.QueryExecModeCacheDescribe behind a transaction pooler (see WithTransactionPooler): %w",
			who, mode, store.ErrInvalidParams)
	}
	return nil
}

// pollingOnly reports whether the Store must not LISTEN: its pool goes
// through a transaction pooler and the listener has no direct connection.
func (s *Store) pollingOnly() bool {
	return s.opts.txPooler && s.opts.listenerDSN == ""
}
