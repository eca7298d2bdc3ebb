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
//     reuses: on another server connection they do not exist ("prepared
//     statement "stmtcache_..." does not exist"), and PgBouncer before 1.21
//     does not carry them over. New refuses (store.ErrInvalidParams) a pool
//     whose ConnConfig.DefaultQueryExecMode is QueryExecModeCacheStatement
//     or QueryExecModeDescribeExec (whose describe and execute may land on
//     two server connections). Build the pool with
//
//     cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
//
//     which sends each statement with its parameters in one round trip
//     through the unnamed statement (types taken from the Go values, in
//     the text format), and never describes or prepares ahead. Every
//     execution is then parsed and planned again: the cost, measured in
//     docs/deployments.md, is a few percent of throughput. Its plans are
//     custom plans; the statements pgstore forces generic (the flow claim)
//     stay generic, since plan_cache_mode applies to the unnamed statement
//     too. QueryExecModeCacheDescribe and QueryExecModeSimpleProtocol also
//     work, and pass the conformance suite; Exec is the one pgx recommends
//     and the one AX's deployment suite runs.
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
// transaction). The listener's connection is the only one pgstore opens
// outside the pool.
func WithTransactionPooler() Option {
	return optionFunc(func(o *options) { o.txPooler = true })
}

// checkPoolerMode refuses, with WithTransactionPooler, a pool whose query
// execution mode needs a statement to stay on one server connection
// across round trips.
func checkPoolerMode(pool *pgxpool.Pool, o *options) error {
	if !o.txPooler {
		return nil
	}
	switch mode := pool.Config().ConnConfig.DefaultQueryExecMode; mode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec:
		return fmt.Errorf("pgstore: WithTransactionPooler: the pool's DefaultQueryExecMode (%v) needs a session the pooler does not keep; set cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec: %w",
			mode, store.ErrInvalidParams)
	}
	return nil
}

// pollingOnly reports whether the Store must not LISTEN: its pool goes
// through a transaction pooler and the listener has no direct connection.
func (s *Store) pollingOnly() bool {
	return s.opts.txPooler && s.opts.listenerDSN == ""
}
