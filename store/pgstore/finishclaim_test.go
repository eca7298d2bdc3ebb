package pgstore_test

import (
	"context"
	"slices"
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

// batchTracer records the statements of each batch sent on a pool.
type batchTracer struct {
	mu      sync.Mutex
	batches [][]string
}

func (b *batchTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (b *batchTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (b *batchTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	b.mu.Lock()
	b.batches = append(b.batches, sqls)
	b.mu.Unlock()
	return ctx
}

func (b *batchTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (b *batchTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// newTracedStore returns a Store on a fresh database, closed when t ends,
// its pool (for statements a test runs beside it), and the batchTracer
// that records the pool's batches.
func newTracedStore(t *testing.T) (*pgstore.Store, *pgxpool.Pool, *batchTracer) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	tracer := &batchTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := pgstore.New(ctxT(t), pool)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, pool, tracer
}

// together counts the batches that held both statements.
func (b *batchTracer) together(a, c string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, sqls := range b.batches {
		if slices.Contains(sqls, a) && slices.Contains(sqls, c) {
			n++
		}
	}
	return n
}

// TestFinishClaimOneRoundTrip: plain outcomes of kinds without flow
// settings go out in one batch with the claim; outcomes with results, a
// kind with flow settings take the two-call path, and still write and
// claim.
func TestFinishClaimOneRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(t *testing.T, s *pgstore.Store)
		finish  func(p *store.FinishParams)
		oneTrip bool
	}{
		{name: "Plain", oneTrip: true},
		{name: "Result", finish: func(p *store.FinishParams) { p.Result = []byte(`{}`) }},
		{name: "FlowSettings", setup: func(t *testing.T, s *pgstore.Store) {
			require.NoError(t, s.SetFlows(ctxT(t), &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{{Kind: "k", Concurrency: 10}}}))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _, tracer := newTracedStore(t)
			if c.setup != nil {
				c.setup(t, s)
			}

			ctx := ctxT(t)
			_, err := s.Insert(ctx, []store.InsertParams{job("k"), job("k")})
			require.NoError(t, err)
			claimP := &store.ClaimParams{Owner: "n", Limit: 1, LeaseDuration: time.Minute, Kinds: []store.KindLimit{{Kind: "k", Limit: 1}}}
			res, err := s.Claim(ctx, claimP)
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			done := res.Jobs[0]
			fin := []store.FinishParams{{Lease: store.Lease{ID: done.ID, Token: done.LeaseToken}, Outcome: store.OutcomeSucceeded}}
			if c.finish != nil {
				c.finish(&fin[0])
			}

			fr, got, err := s.FinishClaim(ctx, fin, claimP)
			require.NoError(t, err)
			require.Equal(t, []bool{true}, fr.OK)
			require.Len(t, got.Jobs, 1)
			require.NotEqual(t, done.ID, got.Jobs[0].ID)
			rec, err := s.Get(ctx, done.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateSucceeded, rec.State)
			n := tracer.together(s.FinishSQL(), s.ClaimOneKindSQL())
			if c.oneTrip {
				require.Equal(t, 1, n, "finish and claim in one batch")
			} else {
				require.Zero(t, n, "finish and claim in one batch")
			}
		})
	}
}

// TestFinishClaimWaitsForHeldRow: an outcome whose row another transaction
// holds does not hold back the claim or the other outcomes, which commit
// first; FinishClaim then waits for the lock and writes it, as Finish
// does.
func TestFinishClaimWaitsForHeldRow(t *testing.T) {
	pool, s := newPoolStore(t)
	ctx := ctxT(t)
	_, err := s.Insert(ctx, []store.InsertParams{job("k"), job("k"), job("k")})
	require.NoError(t, err)
	claimP := &store.ClaimParams{Owner: "n", Limit: 2, LeaseDuration: time.Minute, Kinds: []store.KindLimit{{Kind: "k", Limit: 2}}}
	res, err := s.Claim(ctx, claimP)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	held, free := res.Jobs[0], res.Jobs[1]

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM ax.jobs WHERE id = $1 FOR UPDATE`, [16]byte(held.ID))
	require.NoError(t, err)

	type result struct {
		fr  *store.FinishResult
		res *store.ClaimResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		fr, res, err := s.FinishClaim(ctx, []store.FinishParams{
			{Lease: store.Lease{ID: held.ID, Token: held.LeaseToken}, Outcome: store.OutcomeSucceeded},
			{Lease: store.Lease{ID: free.ID, Token: free.LeaseToken}, Outcome: store.OutcomeSucceeded},
		}, claimP)
		done <- result{fr, res, err}
	}()
	// The other outcome and the claim commit while the row is held.
	require.Eventually(t, func() bool {
		rec, err := s.Get(ctx, free.ID)
		return err == nil && rec.State == store.StateSucceeded
	}, 10*time.Second, 5*time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("FinishClaim returned (%+v, %v) while the row was held", r.fr, r.err)
	default:
	}
	require.NoError(t, tx.Rollback(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, []bool{true, true}, r.fr.OK)
	require.Len(t, r.res.Jobs, 1, "the third job")
	rec, err := s.Get(ctx, held.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateSucceeded, rec.State)
}
