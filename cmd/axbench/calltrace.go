package main

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// callTracer splits a store call into the time it waited for a pool
// connection and the time its statements took from pgx (the round trip:
// sending, the server's work and commit, the reply, and the wake-up of
// the goroutine that reads it). It is a pgx.QueryTracer, a
// pgx.BatchTracer (a batch counts as one statement, from its send to its
// close) and a pgxpool.AcquireTracer; it times only calls whose context carries a
// *callTimes (withCallTimes), so the scheduler's other statements cost
// it nothing.
type callTracer struct{}

var (
	_ pgx.QueryTracer       = callTracer{}
	_ pgx.BatchTracer       = callTracer{}
	_ pgxpool.AcquireTracer = callTracer{}
)

// callTimes is what callTracer measured of one store call. A call is one
// goroutine's, so the fields need no lock.
type callTimes struct {
	acquire, query     time.Duration
	queries            int
	acquireAt, queryAt time.Time
}

type callTimesKey struct{}

// withCallTimes returns ctx with ct attached, for callTracer to fill.
func withCallTimes(ctx context.Context, ct *callTimes) context.Context {
	return context.WithValue(ctx, callTimesKey{}, ct)
}

func callTimesOf(ctx context.Context) *callTimes {
	ct, _ := ctx.Value(callTimesKey{}).(*callTimes)
	return ct
}

// traced is a pool edit (newPool, openSession) installing callTracer.
func traced(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = callTracer{} }

func (callTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if ct := callTimesOf(ctx); ct != nil {
		ct.acquireAt = time.Now()
	}
	return ctx
}

func (callTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if ct := callTimesOf(ctx); ct != nil && !ct.acquireAt.IsZero() {
		ct.acquire += time.Since(ct.acquireAt)
	}
}

func (callTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if ct := callTimesOf(ctx); ct != nil {
		ct.queryAt = time.Now()
	}
	return ctx
}

func (callTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ct := callTimesOf(ctx); ct != nil && !ct.queryAt.IsZero() {
		ct.query += time.Since(ct.queryAt)
		ct.queries++
	}
}

func (callTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if ct := callTimesOf(ctx); ct != nil {
		ct.queryAt = time.Now()
	}
	return ctx
}

func (callTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (callTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if ct := callTimesOf(ctx); ct != nil && !ct.queryAt.IsZero() {
		ct.query += time.Since(ct.queryAt)
		ct.queries++
	}
}

// preparedPlans counts, over the pool's idle connections, the custom and
// generic plans PostgreSQL made for the prepared statements whose text
// starts with prefix (pg_prepared_statements, PostgreSQL 14+): a
// statement on a generic plan is not planned again at each execution.
func preparedPlans(ctx context.Context, pool *pgxpool.Pool, prefix string) (custom, generic int64, err error) {
	for _, c := range pool.AcquireAllIdle(ctx) {
		var cu, ge int64
		if err == nil {
			err = c.QueryRow(ctx, `SELECT coalesce(sum(custom_plans), 0), coalesce(sum(generic_plans), 0)
				FROM pg_prepared_statements WHERE starts_with(statement, $1)`, strings.TrimSpace(prefix)).Scan(&cu, &ge)
			custom, generic = custom+cu, generic+ge
		}
		c.Release()
	}
	return custom, generic, err
}
