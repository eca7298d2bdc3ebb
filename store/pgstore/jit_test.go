package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestFlowStatementsRunWithoutJIT runs flow claims and flow finishes (on
// the pool, and in the transaction a kind with a breaker needs) on
// sessions that JIT-compile every statement (jit_above_cost = 0), and
// reads each statement's plan from auto_explain: no flow statement may
// have been compiled. On a table that autovacuum analyzed with 100,000 due
// jobs the flow claim's estimated cost passed every JIT threshold, and
// compiling it took 1.7–2 s per claim (jitOffSQL). A statement the test
// runs itself on the same pool is compiled, which shows the sessions
// would compile and the check can fail.
func TestFlowStatementsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["jit"] = "on"
	cfg.ConnConfig.RuntimeParams["jit_above_cost"] = "0"
	var (
		mu       sync.Mutex
		compiled = map[string]bool{} // query text → JIT-compiled
	)
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		i := strings.Index(n.Message, "{")
		if i < 0 {
			return
		}
		var doc struct {
			QueryText string          `json:"Query Text"`
			JIT       json.RawMessage `json:"JIT"`
		}
		if json.Unmarshal([]byte(n.Message[i:]), &doc) != nil {
			return
		}
		mu.Lock()
		compiled[doc.QueryText] = compiled[doc.QueryText] || doc.JIT != nil
		mu.Unlock()
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		for _, q := range []string{
			`LOAD 'auto_explain'`,
			`SET auto_explain.log_min_duration = 0`,
			`SET auto_explain.log_format = json`,
			`SET auto_explain.log_level = notice`,
		} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	var available bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available))
	if !available {
		t.Skip("this PostgreSQL server has no JIT provider (pg_jit_available() is false): nothing to turn off")
	}
	const control = `SELECT count(*) FROM ax.jobs WHERE kind = 'control'`
	_, err = pool.Exec(ctx, control)
	require.NoError(t, err)

	s, err := pgstore.New(ctx, pool)
	require.NoError(t, err)
	defer s.Close()
	breaker := store.BreakerConfig{Failures: 3, CoolDown: time.Second, MaxCoolDown: time.Minute}
	for _, flows := range [][]store.FlowConfig{
		// Without a breaker the flow Finish runs on the pool; with one, in
		// a transaction that feeds it.
		{{Kind: "jit.conc", Concurrency: 5}, {Kind: "jit.rate", Rate: store.RateLimit{Limit: 1000, Period: time.Second}}},
		{{Kind: "jit.conc", Concurrency: 5}, {Kind: "jit.breaker", Breaker: breaker}},
	} {
		require.NoError(t, s.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: flows}))
		for _, f := range flows {
			_, err := s.Insert(ctx, []store.InsertParams{job(f.Kind), job(f.Kind)})
			require.NoError(t, err)
			res, err := s.Claim(ctx, &store.ClaimParams{Owner: "jit", Kinds: []store.KindLimit{{Kind: f.Kind, Limit: 2}},
				Limit: 2, LeaseDuration: time.Hour})
			require.NoError(t, err)
			require.NotEmpty(t, res.Jobs, f.Kind)
			var fin []store.FinishParams
			for _, j := range res.Jobs {
				fin = append(fin, store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeSucceeded})
			}
			_, err = s.Finish(ctx, fin)
			require.NoError(t, err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	require.True(t, compiled[control], "the test's own statement was not JIT-compiled: the sessions' settings did not take")
	for name, sql := range s.FlowSQL() {
		was, ran := compiled[sql]
		require.True(t, ran, "no plan of the %s among %d statements: auto_explain did not see it", name, len(compiled))
		require.False(t, was, "the %s was JIT-compiled", name)
	}
}
