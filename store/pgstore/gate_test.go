package pgstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// statementGate stops a statement between its snapshot and its locks: the
// test holds an advisory lock that the statement, edited by into, takes
// in its first CTE. While the statement waits at the gate the test writes rows the
// statement's snapshot does not see, then opens the gate.
type statementGate struct {
	key    int
	pool   *pgxpool.Pool
	holder *pgxpool.Conn // holds the gate
	conn   *pgxpool.Conn // runs the statement
	pid    int32         // conn's backend
}

// newStatementGate takes the advisory lock key on a connection of pool and
// returns the gate, with a second connection for the statement. Both are
// released, and the lock let go, when t ends.
func newStatementGate(t *testing.T, pool *pgxpool.Pool, key int) *statementGate {
	ctx := ctxT(t)
	g := &statementGate{key: key, pool: pool}
	var err error
	g.holder, err = pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(g.holder.Release)
	_, err = g.holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = g.holder.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, key) })
	g.conn, err = pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(g.conn.Release)
	require.NoError(t, g.conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&g.pid))
	return g
}

// into returns sql with its first old replaced by new, in which {gate}
// stands for a FROM item that takes the gate's lock.
func (g *statementGate) into(t *testing.T, sql, old, new string) string {
	t.Helper()
	item := "(SELECT pg_advisory_xact_lock(" + strconv.Itoa(g.key) + ")) gate"
	gated := strings.Replace(sql, old, strings.ReplaceAll(new, "{gate}", item), 1)
	require.NotEqual(t, sql, gated, "the statement no longer reads as the test expects: %q not found", old)
	return gated
}

// waitAt waits until the gate's statement waits for the gate (what is
// the statement, for the message).
func (g *statementGate) waitAt(t *testing.T, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		err := g.pool.QueryRow(ctxT(t), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE pid = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory')`, g.pid).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "%s never waited at the gate", what)
}

// open lets the gate's statement go on.
func (g *statementGate) open(t *testing.T) {
	t.Helper()
	_, err := g.holder.Exec(ctxT(t), `SELECT pg_advisory_unlock($1)`, g.key)
	require.NoError(t, err)
}
