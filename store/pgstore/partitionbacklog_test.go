package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// hookJob is a job of the partitioned kind "hook" in partition p ("" for
// none: no field p in its payload).
func hookJob(p string) store.InsertParams {
	payload := []byte(`{}`)
	if p != "" {
		payload = fmt.Appendf(nil, `{"p":%q}`, p)
	}
	return store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "hook", Payload: payload,
		Priority: store.PriorityNormal, MaxAttempts: 3}
}

// hookFlows partitions "hook" by its payload's field p, five running at
// most per partition.
var hookFlows = &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{
	{Kind: "hook", Partition: store.PartitionSource{PayloadField: "p"}, PartitionConcurrency: 5}}}

// fillHeldPartition declares hookFlows on s, fills the partition "bad"'s
// 5 slots and leaves backlog of its jobs due behind them, and returns the
// claim of the kind that took the 5.
func fillHeldPartition(ctx context.Context, t testing.TB, s *pgstore.Store, backlog int) *store.ClaimParams {
	t.Helper()
	require.NoError(t, s.SetFlows(ctx, hookFlows))
	bad := make([]store.InsertParams, 5+backlog)
	for i := range bad {
		bad[i] = hookJob("bad")
	}
	for i := 0; i < len(bad); i += 1000 {
		_, err := s.Insert(ctx, bad[i:min(i+1000, len(bad))])
		require.NoError(t, err)
	}
	claim := &store.ClaimParams{Owner: "o", Limit: 10, LeaseDuration: time.Hour,
		Kinds: []store.KindLimit{{Kind: "hook", Limit: 10}}}
	held, err := s.Claim(ctx, claim)
	require.NoError(t, err)
	require.Len(t, held.Jobs, 5, "the bad partition fills its 5 slots")
	return claim
}

// TestFlowClaimReadsNoHeldBacklog (issue 40): with one partition full (5
// running) and 3,000 of its jobs due behind them, a claim of the kind
// (its claim statement and its read of what is left, under auto_explain)
// throws away no more than a few rows in any filter: it reads the other
// partitions, the partition "" included, through their own index
// entries. Before, every partition's read, the one of the partition ""
// above all, walked jobs_claim_idx over the held backlog (Rows Removed by
// Filter: 3,000 per read). The first claim of the kind sweeps the
// unkeyed marks (unkeyed.go) and may read the backlog once; the claim
// measured is the second.
func TestFlowClaimReadsNoHeldBacklog(t *testing.T) {
	ctx := ctxT(t)
	var (
		mu      sync.Mutex
		notices []string
	)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
			`SET auto_explain.log_analyze = on`, `SET auto_explain.log_timing = off`, `SET auto_explain.log_nested_statements = on`,
			`SET auto_explain.log_format = json`, `SET auto_explain.log_level = notice`} {
			if _, err := c.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := pgstore.New(ctx, pool)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	claim := fillHeldPartition(ctx, t, s, 3000)
	_, err = pool.Exec(ctx, `ANALYZE ax.jobs`)
	require.NoError(t, err)

	_, err = s.Insert(ctx, []store.InsertParams{hookJob("good"), hookJob("")})
	require.NoError(t, err)
	mu.Lock()
	notices = nil
	mu.Unlock()
	res, err := s.Claim(ctx, claim)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2, "the healthy partition's job and the unkeyed one")

	mu.Lock()
	defer mu.Unlock()
	plans := 0
	for _, n := range notices {
		i := strings.Index(n, "{") // after "duration: … plan:"
		if i < 0 {
			continue
		}
		js := n[i:]
		var doc struct {
			Plan map[string]any `json:"Plan"`
		}
		if json.Unmarshal([]byte(js), &doc) != nil || doc.Plan == nil {
			continue
		}
		plans++
		if w := measure(doc.Plan); w.filtered > 50 {
			t.Errorf("a statement of the claim filtered out %d rows (the held backlog is 3,000):\n%s", w.filtered, indentPlan(doc.Plan))
		}
	}
	require.NotZero(t, plans, "auto_explain reported no plan")
}

// BenchmarkFlowClaimBesideHeldBacklog (issue 40): one cycle of a healthy
// partition's job (insert, claim, finish) on a kind whose partition
// "bad" is full (PartitionConcurrency 5, all running) with a backlog of
// due jobs it may not start. A claim must not read the held backlog, so
// the cycle should cost the same at every backlog; before the partition
// "" had an index of its own, its probe walked the kind's every
// claimable job, and the cycle grew with the backlog.
//
//	go test -run '^$' -bench FlowClaimBesideHeldBacklog ./store/pgstore
func BenchmarkFlowClaimBesideHeldBacklog(b *testing.B) {
	for _, backlog := range []int{0, 2000, 8000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			s := newStore(b)
			ctx := ctxT(b)
			claim := fillHeldPartition(ctx, b, s, backlog)
			b.ResetTimer()
			for range b.N {
				_, err := s.Insert(ctx, []store.InsertParams{hookJob("good")})
				require.NoError(b, err)
				res, err := s.Claim(ctx, claim)
				require.NoError(b, err)
				require.Len(b, res.Jobs, 1, "only the healthy job may start")
				ok, err := s.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: res.Jobs[0].ID, Token: res.Jobs[0].LeaseToken},
					Outcome: store.OutcomeSucceeded}})
				require.NoError(b, err)
				require.Equal(b, []bool{true}, ok)
			}
		})
	}
}

// TestUnkeyedMarks: every path that writes a job of a partitioned kind
// marks it unkeyed exactly when it has no key (one row, many rows by
// COPY, many with unique keys, a Then job made from a template in SQL),
// and a job written without the mark (as older code writes it, during a
// rolling deploy) is still claimed: a Store's first claim of the kind
// sweeps the marks (unkeyed.go).
func TestUnkeyedMarks(t *testing.T) {
	pool, s := newPoolStore(t)
	ctx := ctxT(t)
	require.NoError(t, s.SetFlows(ctx, hookFlows))
	unique := func(p store.InsertParams, key string) store.InsertParams {
		p.UniqueKey = key
		return p
	}
	one, oneKeyed := hookJob(""), hookJob("a")
	copied, copiedKeyed := hookJob(""), hookJob("b")
	uniq, uniqKeyed := unique(hookJob(""), "u1"), unique(hookJob("c"), "u2")
	plain := job("other")
	_, err := s.Insert(ctx, []store.InsertParams{one})
	require.NoError(t, err)
	_, err = s.Insert(ctx, []store.InsertParams{oneKeyed})
	require.NoError(t, err)
	_, err = s.Insert(ctx, []store.InsertParams{copied, copiedKeyed, uniq, uniqKeyed, plain})
	require.NoError(t, err)

	parent := job("parent")
	_, err = s.Insert(ctx, []store.InsertParams{parent})
	require.NoError(t, err)
	res, err := s.Claim(ctx, &store.ClaimParams{Owner: "o", Limit: 1, LeaseDuration: time.Minute,
		Kinds: []store.KindLimit{{Kind: "parent", Limit: 1}}})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	then, thenKeyed := hookJob(""), hookJob("d")
	ok, err := s.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: parent.ID, Token: res.Jobs[0].LeaseToken},
		Outcome: store.OutcomeSucceeded, Then: []store.InsertParams{then, thenKeyed}}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)

	// As a host of v1.0 writes a job without a key: no mark.
	straggler := uuid.Must(uuid.NewV7())
	_, err = pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
		VALUES ($1, 'hook', '{}', 2, now(), now(), 3)`, [16]byte(straggler))
	require.NoError(t, err)

	for _, c := range []struct {
		name string
		id   uuid.UUID
		want bool
	}{
		{"one row", one.ID, true}, {"one row, keyed", oneKeyed.ID, false},
		{"COPY", copied.ID, true}, {"COPY, keyed", copiedKeyed.ID, false},
		{"unique key", uniq.ID, true}, {"unique key, keyed", uniqKeyed.ID, false},
		{"kind without partitions", plain.ID, false}, {"parent", parent.ID, false},
		{"Then template", then.ID, true}, {"Then template, keyed", thenKeyed.ID, false},
		{"older code", straggler, false},
	} {
		var got bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT unkeyed FROM ax.jobs WHERE id = $1`, [16]byte(c.id)).Scan(&got), c.name)
		require.Equal(t, c.want, got, c.name)
	}

	claimed := map[uuid.UUID]bool{}
	for range 5 {
		res, err := s.Claim(ctx, &store.ClaimParams{Owner: "o", Limit: 100, LeaseDuration: time.Minute,
			Kinds: []store.KindLimit{{Kind: "hook", Limit: 100}}})
		require.NoError(t, err)
		for _, j := range res.Jobs {
			claimed[j.ID] = true
		}
	}
	for _, id := range []uuid.UUID{one.ID, copied.ID, uniq.ID, then.ID, straggler} {
		require.True(t, claimed[id], "a job of the partition \"\" was not claimed: %s (one %s copied %s uniq %s then %s straggler %s)", id, one.ID, copied.ID, uniq.ID, then.ID, straggler)
	}
}
