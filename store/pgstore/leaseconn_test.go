package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// leaseStore returns a Store on a fresh database whose pool has maxConns
// connections and is built by edit, with one running job's lease.
func leaseStore(t *testing.T, maxConns int32, edit func(*pgxpool.Config), opts ...pgstore.Option) (*pgxpool.Pool, *pgstore.Store, store.Lease) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	if edit != nil {
		edit(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := pgstore.New(context.Background(), pool, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.Insert(ctxT(t), []store.InsertParams{job("lease.conn")})
	require.NoError(t, err)
	return pool, st, claimOne(t, st, "lease.conn")
}

// extendOK extends l for d and requires it held.
func extendOK(t *testing.T, st *pgstore.Store, l store.Lease, d time.Duration) {
	t.Helper()
	res, err := st.ExtendLeases(ctxT(t), &store.ExtendParams{Leases: []store.Lease{l}, Duration: d})
	require.NoError(t, err)
	require.Empty(t, res.Lost)
}

// leaseConnPID returns the server process of the lease connection.
func leaseConnPID(t *testing.T, st *pgstore.Store) uint32 {
	t.Helper()
	var pid uint32
	require.NoError(t, st.OnLeaseConn(ctxT(t), func(c *pgx.Conn) error {
		pid = c.PgConn().PID()
		return nil
	}))
	return pid
}

// waitBackendGone waits until the server has no process pid.
func waitBackendGone(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n))
		return n == 0
	}, 20*time.Second, 10*time.Millisecond, "backend %d still there", pid)
}

// TestExtendLeasesOutsideThePool: with the pool's only connection held
// (a handler's), ExtendLeases still extends the lease. It used to wait
// for the pool until its deadline (issue 40: the heartbeat timed out
// behind busy handlers and the host lost its running jobs' leases).
func TestExtendLeasesOutsideThePool(t *testing.T) {
	pool, st, l := leaseStore(t, 1, nil)
	before, err := st.Get(ctxT(t), l.ID)
	require.NoError(t, err)

	held, err := pool.Acquire(ctxT(t))
	require.NoError(t, err)
	// The deadline only turns a wait for the pool (the defect) into a
	// failure.
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()
	res, err := st.ExtendLeases(ctx, &store.ExtendParams{Leases: []store.Lease{l}, Duration: time.Hour})
	held.Release()
	require.NoError(t, err, "the extension waited for the pool")
	require.Empty(t, res.Lost)

	after, err := st.Get(ctxT(t), l.ID)
	require.NoError(t, err)
	require.True(t, after.LeaseExpiresAt.After(before.LeaseExpiresAt), "lease not extended")
}

// TestLeaseConnReconnects: the lease connection is kept from call to
// call; killed by the server (pg_terminate_backend) while idle, the next
// extension succeeds on a new connection, without a failed call.
func TestLeaseConnReconnects(t *testing.T) {
	pool, st, l := leaseStore(t, 4, nil)
	extendOK(t, st, l, time.Hour)
	pid := leaseConnPID(t, st)
	require.NotZero(t, pid)
	extendOK(t, st, l, time.Hour)
	require.Equal(t, pid, leaseConnPID(t, st), "the connection is kept between calls")

	var killed bool
	require.NoError(t, pool.QueryRow(ctxT(t), `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
	waitBackendGone(t, pool, pid)

	extendOK(t, st, l, 2*time.Hour)
	again := leaseConnPID(t, st)
	require.NotZero(t, again)
	require.NotEqual(t, pid, again, "not a new connection")
}

// TestLeaseConnMaxLifetime: the lease connection is replaced once older
// than the pool's MaxConnLifetime, as the pool replaces its own, and kept
// until then.
func TestLeaseConnMaxLifetime(t *testing.T) {
	_, st, l := leaseStore(t, 4, func(cfg *pgxpool.Config) { cfg.MaxConnLifetime = time.Hour })
	var (
		mu  sync.Mutex
		now = time.Now()
	)
	st.SetLeaseClock(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	})
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	extendOK(t, st, l, time.Hour)
	pid := leaseConnPID(t, st)
	advance(59 * time.Minute)
	extendOK(t, st, l, time.Hour)
	require.Equal(t, pid, leaseConnPID(t, st), "replaced before its lifetime")
	advance(time.Minute)
	extendOK(t, st, l, time.Hour)
	again := leaseConnPID(t, st)
	require.NotEqual(t, pid, again, "kept past the pool's MaxConnLifetime")
	require.NotZero(t, again)
}

// TestLeaseConnClosedByClose: Close closes the lease connection, idle or
// in use (then when its call ends), and later calls return
// store.ErrClosed without opening another. TestMain checks that no
// goroutine is left.
func TestLeaseConnClosedByClose(t *testing.T) {
	t.Run("Idle", func(t *testing.T) {
		pool, st, l := leaseStore(t, 4, nil)
		extendOK(t, st, l, time.Hour)
		pid := leaseConnPID(t, st)
		require.NoError(t, st.Close())
		require.False(t, st.LeaseConnOpen())
		waitBackendGone(t, pool, pid)
		_, err := st.ExtendLeases(ctxT(t), &store.ExtendParams{Leases: []store.Lease{l}, Duration: time.Hour})
		require.ErrorIs(t, err, store.ErrClosed)
		require.ErrorIs(t, st.OnLeaseConn(ctxT(t), func(*pgx.Conn) error { return nil }), store.ErrClosed)
		require.False(t, st.LeaseConnOpen(), "a connection opened after Close")
	})
	t.Run("InUse", func(t *testing.T) {
		pool, st, l := leaseStore(t, 4, nil)
		extendOK(t, st, l, time.Hour)
		var pid uint32
		require.NoError(t, st.OnLeaseConn(ctxT(t), func(c *pgx.Conn) error {
			pid = c.PgConn().PID()
			require.NoError(t, st.Close()) // does not wait for this call
			_, err := c.Exec(ctxT(t), `SELECT 1`)
			return err
		}))
		require.False(t, st.LeaseConnOpen())
		waitBackendGone(t, pool, pid)
	})
}

// TestLeaseConnSerializes: many concurrent extensions share the one
// connection (pgx.Conn is not safe for concurrent use: unserialized, the
// calls fail with "conn busy" and the race detector objects).
func TestLeaseConnSerializes(t *testing.T) {
	_, st, l := leaseStore(t, 4, nil)
	const callers, calls = 16, 20
	errs := make(chan error, callers*calls)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range calls {
				res, err := st.ExtendLeases(ctxT(t), &store.ExtendParams{Leases: []store.Lease{l}, Duration: time.Hour})
				if err == nil && len(res.Lost) > 0 {
					err = errors.New("lease reported lost")
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestLeaseConnLikeThePool: the lease connection is opened as the pool
// opens its own: the pool's query execution mode (with
// WithTransactionPooler, QueryExecModeCacheDescribe, which prepares no
// named statement a transaction pooler would lose; by default, cached
// prepared statements) and the pool's AfterConnect hook.
func TestLeaseConnLikeThePool(t *testing.T) {
	cases := []struct {
		name     string
		mode     pgx.QueryExecMode
		opts     []pgstore.Option
		prepared bool // whether the extension left a named prepared statement
	}{
		{"Default", pgx.QueryExecModeCacheStatement, nil, true},
		{"TransactionPooler", pgx.QueryExecModeCacheDescribe, []pgstore.Option{pgstore.WithTransactionPooler()}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, st, l := leaseStore(t, 4, func(cfg *pgxpool.Config) {
				cfg.ConnConfig.DefaultQueryExecMode = c.mode
				cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
					_, err := conn.Exec(ctx, `SET application_name = 'after_connect_ran'`)
					return err
				}
			}, c.opts...)
			extendOK(t, st, l, time.Hour)
			var (
				prepared int
				app      string
			)
			require.NoError(t, st.OnLeaseConn(ctxT(t), func(conn *pgx.Conn) error {
				require.Equal(t, c.mode, conn.Config().DefaultQueryExecMode)
				// The simple protocol prepares nothing itself.
				if err := conn.QueryRow(ctxT(t), `SELECT count(*) FROM pg_prepared_statements`,
					pgx.QueryExecModeSimpleProtocol).Scan(&prepared); err != nil {
					return err
				}
				return conn.QueryRow(ctxT(t), `SHOW application_name`, pgx.QueryExecModeSimpleProtocol).Scan(&app)
			}))
			require.Equal(t, c.prepared, prepared > 0, "%d prepared statements", prepared)
			require.Equal(t, "after_connect_ran", app)
		})
	}
}

// TestLeaseConnFallsBackToPool: when the lease connection cannot be
// opened (the server's max_connections reached, say), the extension runs
// on the pool, as it did before the Store had a connection of its own.
func TestLeaseConnFallsBackToPool(t *testing.T) {
	_, st, l := leaseStore(t, 4, nil)
	st.SetLeaseDial(func(context.Context) (*pgx.Conn, error) {
		return nil, errors.New("FATAL: sorry, too many clients already")
	})
	extendOK(t, st, l, time.Hour)
	require.False(t, st.LeaseConnOpen())
}
