package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// WithAsyncFinish makes the Store commit the outcomes it writes (Finish,
// FinishFlow: successes, retries, failures, hand-backs) without waiting
// for PostgreSQL to flush them to disk, with synchronous_commit off for
// those transactions only. Everything else keeps the server's setting:
// Schedule's inserts, claims, lease extensions, operator actions, and
// CompleteTx, which commits as its caller's transaction does.
//
// Use it where a commit's flush is the cost that matters: a disk whose
// fsync takes milliseconds (network volumes), many workers finishing
// short jobs. On this project's test machine (about 2 ms per WAL flush)
// it lets 100 workers complete about 1.7 times the jobs per second.
//
// What it gives up: an outcome acknowledged in the last moments (up to
// three times wal_writer_delay, 600 ms by default) before PostgreSQL
// crashes, or before a failover to a standby, can be lost with the
// server. Its job is then still running under its old lease, and runs
// again once the lease expires, as after a host's crash: no job is lost,
// a job may run twice. Without this option a success that a host saw
// written is never run again, even across a failover to a synchronous
// standby. A clean shutdown or restart of PostgreSQL loses nothing.
func WithAsyncFinish() Option {
	return optionFunc(func(o *options) { o.asyncFinish = true })
}

// asyncCommitSQL turns synchronous_commit off until the end of the
// transaction it runs in.
const asyncCommitSQL = `SELECT set_config('synchronous_commit', 'off', true)`

// asyncEnd reports whether the outcomes written under ctx commit without
// waiting for the WAL flush: with WithAsyncFinish, in any transaction but
// a caller's (CompleteTx), whose durability its caller chose.
func (s *Store) asyncEnd(ctx context.Context) bool {
	return s.opts.asyncFinish && ctx.Value(userTxKey{}) == nil
}

// queryEnd runs a statement that writes outcomes on q, after
// asyncCommitSQL in the same transaction (one round trip: on the pool,
// the two share the batch's implicit transaction) when asyncEnd(ctx).
// done closes what queryEnd opened and returns the first error: the
// caller's reading the rows (err), the setting's, or the commit's.
func (s *Store) queryEnd(ctx context.Context, q querier, sql string, args ...any) (rows pgx.Rows, done func(err error) error) {
	if !s.asyncEnd(ctx) {
		rows, _ = q.Query(ctx, sql, args...)
		return rows, func(err error) error { return err }
	}
	b := &pgx.Batch{}
	b.Queue(asyncCommitSQL)
	b.Queue(sql, args...)
	br := q.SendBatch(ctx, b)
	_, setErr := br.Exec()
	rows, _ = br.Query()
	return rows, func(err error) error {
		rows.Close()
		closeErr := br.Close()
		switch {
		case setErr != nil:
			return fmt.Errorf("turn synchronous_commit off: %w", setErr)
		case err != nil:
			return err
		default:
			return closeErr
		}
	}
}
