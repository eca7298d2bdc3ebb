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
			if c.setup != nil {
				c.setup(t, s)
			}

			ctx := ctxT(t)
			_, err = s.Insert(ctx, []store.InsertParams{job("k"), job("k")})
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
			n := tracer.together(s.FinishSQL(), s.ClaimSQL())
			if c.oneTrip {
				require.Equal(t, 1, n, "finish and claim in one batch")
			} else {
				require.Zero(t, n, "finish and claim in one batch")
			}
		})
	}
}
