package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WithEarlyDirectStart lets a direct start (ax's Schedule of a job due at
// once on a host with a free worker, store.InsertClaimer) start its job
// while PostgreSQL flushes the insert to disk, instead of after: the
// insert commits with synchronous_commit off, the Store hands the claimed
// job to the Scheduler (store.EarlyStarter), and only then waits for the
// flush with a second, tiny transaction (a logical message, flushSQL)
// that commits with the server's setting and so flushes the WAL past the
// insert. Schedule returns once that second commit did: a nil error still
// means the job is on disk (and, with synchronous_standby_names, on the
// standby), as without the option. New runs that statement once and fails
// if the server or the role refuses it.
//
// Use it where an immediate job's start must not wait for the disk: on a
// busy host a WAL flush, and the wake-up after it, take milliseconds. On
// this project's 2-core test machine with two busy programs beside, the
// server's own one-row commit took 8 ms at p99 and so did a direct start
// without the option; with it the handler started 3.4–4.2 ms after the
// call at p99 in three runs, and with the database 1 ms away on a quiet
// machine 2.19 ms at p50 and 6.04 at p99 against 2.61 and 7.14
// (docs/performance.md). Schedule itself takes as long as without
// the option, plus one round trip, and each direct start uses a second
// transaction ID and about 100 bytes more WAL (a message and a commit
// record).
//
// What it gives up, only when PostgreSQL crashes or fails over to a
// standby during that flush (milliseconds): the job may have started, or
// even run, on this host and still be lost with the server, and its
// Schedule then returns an error. Without the option a job never starts
// before it is durable, though an error from Schedule can still mean that
// the job was stored (the connection dropped after the commit). A job
// with a unique key is inserted as without the option, so that a retry of
// a Schedule that failed this way cannot run a keyed job twice. A job
// that the insert does not claim (another job of its kind is due and
// waiting) is committed the same way and can be claimed by any host
// before the flush. A clean shutdown or restart of PostgreSQL loses
// nothing either way. An early-started job's EventStarted can come
// before its EventScheduled, and without it when Schedule fails.
func WithEarlyDirectStart() Option {
	return optionFunc(func(o *options) { o.earlyStart = true })
}

// earlyInsertSettings is the statement a direct start's insert follows
// under WithEarlyDirectStart: its transaction commits without waiting for
// the WAL flush.
const earlyInsertSettings = `SELECT ` + syncOff

// flushSQL waits until the WAL is durable up to the point where it runs.
// PostgreSQL flushes at commit only a transaction that has a transaction
// ID and wrote WAL (taking an ID alone, pg_current_xact_id(), commits
// without a flush); a transactional logical message does both, in about
// a hundred bytes of WAL, without touching a table or taking a lock, and
// at any wal_level. Its commit, under the server's synchronous_commit, is
// flushed (and replicated) with everything before it. Logical decoding
// consumers that ask for messages see it under flushPrefix.
const flushSQL = `SELECT pg_logical_emit_message(true, '` + flushPrefix + `', '')`

// flushPrefix names flushSQL's messages for logical decoding consumers.
const flushPrefix = "axsched.flush"

// insertClaimedRow runs the direct start's insert and scans its row into
// dest. early: its transaction commits without waiting for the flush
// (WithEarlyDirectStart); the row is committed, visible to every session,
// when it returns.
func (s *Store) insertClaimedRow(ctx context.Context, early bool, dest []any, args ...any) error {
	if !early {
		return s.pool.QueryRow(ctx, s.q.insertClaimed, args...).Scan(dest...)
	}
	b := &pgx.Batch{}
	b.Queue(earlyInsertSettings)
	b.Queue(s.q.insertClaimed, args...)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fmt.Errorf("settings: %w", err)
	}
	err := br.QueryRow().Scan(dest...)
	// The batch's implicit transaction commits when it ends: Close reads
	// up to that.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// waitFlushed returns once everything committed before the call is on
// disk (flushSQL).
func (s *Store) waitFlushed(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, flushSQL); err != nil {
		return fmt.Errorf("wait for the insert's flush: %w", err)
	}
	return nil
}

// checkEarlyStart runs flushSQL once, so that a server or role that
// refuses it (pg_logical_emit_message revoked) fails New, not a
// Schedule call.
func checkEarlyStart(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, flushSQL); err != nil {
		return fmt.Errorf("pgstore: WithEarlyDirectStart needs %s to run: %w", flushSQL, err)
	}
	return nil
}
