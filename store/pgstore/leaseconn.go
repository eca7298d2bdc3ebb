package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// leaseConn is the Store's own connection for ExtendLeases, outside the
// pool: a heartbeat that waited for a pool connection behind busy
// handlers (which use the application's pool too) timed out beat after
// beat, and the host lost the leases of the very jobs it was running
// (issue 40: 78 leases lost in one run of 50 workers on a 4-connection
// pool). With a connection of its own, the extension waits only for
// other extensions of the same Store.
//
// The connection is opened with the pool's configuration (its
// ConnConfig, DefaultQueryExecMode included, so it goes through a
// transaction pooler as the pool does; and its BeforeConnect and
// AfterConnect hooks), at the first extension, not in New: a Store that
// runs no jobs never opens it. pgx.Conn is not safe for concurrent use,
// so calls take turns: the connection sits in a one-slot channel while
// idle, and a call waiting for its turn gives up when its context ends.
// A call that finds the connection broken (killed by the server, a
// failover, a timed-out statement, which pgx closes) opens a new one, and
// so does a call that finds it older than the pool's MaxConnLifetime, as
// the pool replaces its own (so that it, too, moves to where DNS or a
// multi-host connection string now points, and picks up rotated
// credentials). Close closes it, at once when idle, or when the call using
// it ends.
type leaseConn struct {
	dial    func(context.Context) (*pgx.Conn, error)
	maxLife time.Duration // the pool's MaxConnLifetime; 0: no limit
	now     func() time.Time
	// born is when the connection in use was opened; only the call
	// holding the connection reads or writes it.
	born time.Time
	// slot holds the connection (nil when none is open) while no call
	// uses it; a call takes it out and puts it back.
	slot chan *pgx.Conn

	mu     sync.Mutex // guards closed against the slot's give back
	closed bool
}

// leaseConnCloseTimeout bounds closing the connection (pgx sends the
// server a Terminate message first).
const leaseConnCloseTimeout = time.Second

func newLeaseConn(dial func(context.Context) (*pgx.Conn, error), maxLife time.Duration, now func() time.Time) *leaseConn {
	lc := &leaseConn{dial: dial, maxLife: maxLife, now: now, slot: make(chan *pgx.Conn, 1)}
	lc.slot <- nil
	return lc
}

// dialError is a failure to open the connection: fn did not run.
type dialError struct{ err error }

func (e *dialError) Error() string { return fmt.Sprintf("open lease connection: %v", e.err) }
func (e *dialError) Unwrap() error { return e.err }

// do runs fn on the connection, opening one when none is open, once the
// calls before it are done; it returns ctx's error if that takes too long,
// and store.ErrClosed after close. A connection that fn's failure left
// closed is dropped, and the next call opens another. When it had served
// an earlier call (so it may have died while idle: killed with
// pg_terminate_backend, cut by a restart or failover), fn runs once more
// on a fresh connection, so a connection that died unseen costs no call:
// fn must be safe to run twice. A failure to open the connection is a
// *dialError.
func (lc *leaseConn) do(ctx context.Context, fn func(*pgx.Conn) error) error {
	var c *pgx.Conn
	select {
	case c = <-lc.slot:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { lc.giveBack(c) }()
	if lc.isClosed() {
		return store.ErrClosed
	}
	if c != nil && lc.maxLife > 0 && lc.now().Sub(lc.born) >= lc.maxLife {
		closeConn(c)
		c = nil
	}
	for retried := false; ; retried = true {
		reused := c != nil && !c.IsClosed()
		if !reused {
			c = nil
			nc, err := lc.dial(ctx)
			if err != nil {
				return &dialError{err}
			}
			c, lc.born = nc, lc.now()
		}
		err := fn(c)
		if err == nil || !c.IsClosed() {
			return err
		}
		c = nil
		if !reused || retried || ctx.Err() != nil {
			return err
		}
	}
}

// giveBack returns c to the slot, or closes it when the Store closed while
// c was in use.
func (lc *leaseConn) giveBack(c *pgx.Conn) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed && c != nil {
		closeConn(c)
		c = nil
	}
	lc.slot <- c
}

func (lc *leaseConn) isClosed() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.closed
}

// close closes the connection if it is idle, and makes the call using it,
// if any, close it when done; later calls return store.ErrClosed. It does
// not wait for that call. Safe to call more than once.
func (lc *leaseConn) close() {
	lc.mu.Lock()
	lc.closed = true
	lc.mu.Unlock()
	select {
	case c := <-lc.slot:
		if c != nil {
			closeConn(c)
		}
		lc.slot <- nil
	default: // in use: giveBack closes it
	}
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseConnCloseTimeout)
	defer cancel()
	_ = c.Close(ctx) // the socket is closed whatever the Terminate's fate
}

// dialLeaseConn opens a connection as the pool would open one: its
// ConnConfig (a copy), its BeforeConnect and AfterConnect hooks. (Its
// MaxConnLifetime is leaseConn's.)
func (s *Store) dialLeaseConn(ctx context.Context) (*pgx.Conn, error) {
	pc := s.pool.Config()
	cc := pc.ConnConfig
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, cc); err != nil {
			return nil, fmt.Errorf("pool's BeforeConnect: %w", err)
		}
	}
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if pc.AfterConnect != nil {
		if err := pc.AfterConnect(ctx, c); err != nil {
			closeConn(c)
			return nil, fmt.Errorf("pool's AfterConnect: %w", err)
		}
	}
	return c, nil
}

// onLeaseConn runs fn on the lease connection (see leaseConn). When that
// connection cannot be opened (the server's max_connections reached, a
// hook failing) and ctx still allows, fn runs on the pool instead, as it
// did before the Store had a connection of its own: slower under load,
// but not worse.
func (s *Store) onLeaseConn(ctx context.Context, fn func(querier) error) error {
	err := s.leases.do(ctx, func(c *pgx.Conn) error { return fn(c) })
	var de *dialError
	if errors.As(err, &de) && ctx.Err() == nil {
		return fn(s.pool)
	}
	return err
}
