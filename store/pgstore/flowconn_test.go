package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestFlowInsertTakesOneConnection: an insert under flow control reads
// the flow settings, when its cache is stale, on the transaction it
// already holds. It used to take a second connection from the pool
// inside that transaction: with the pool exhausted by such inserts
// (ten racing producers through PgBouncer in CI), every one waited for
// a connection another held until its deadline. On a pool of one
// connection the insert then never returned.
func TestFlowInsertTakesOneConnection(t *testing.T) {
	_, s := oneConnStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// SetFlows empties the cache: the next flow insert reads the table.
	if err := s.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{{Kind: "one", MaxPending: 5}}}); err != nil {
		t.Fatal(err)
	}
	p := job("one")
	p.PendingLimit = 10 // takes the flow path without reading the settings first
	if _, err := s.Insert(ctx, []store.InsertParams{p}); err != nil {
		t.Fatalf("insert under flow control on a pool of one connection: %v", err)
	}
}

// oneConnStore returns a Store on a fresh database through a pool of one
// connection, and the pool.
func oneConnStore(t *testing.T) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return pool, s
}

// TestCompleteTxTakesOneConnection: the first outcome of a process's day,
// written in the caller's transaction, does not create the history's
// partitions on a second pool connection while the caller's transaction
// holds one (finishWindow). On a pool of one connection CompleteTx then
// never returned; now the job ends in jobs, for the archive pass to move.
func TestCompleteTxTakesOneConnection(t *testing.T) {
	pool, s := oneConnStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Insert(ctx, []store.InsertParams{job("tx")}); err != nil {
		t.Fatal(err)
	}
	lease := claimOne(t, s, "tx")
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ok, err := s.CompleteTx(ctx, tx, store.FinishParams{Lease: lease, Outcome: store.OutcomeSucceeded})
		if err == nil && !ok {
			t.Error("CompleteTx did not apply")
		}
		return err
	}); err != nil {
		t.Fatalf("CompleteTx on a pool of one connection: %v", err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM ax.jobs_all WHERE id = $1`, [16]byte(lease.ID)).Scan(&state); err != nil || state != "succeeded" {
		t.Fatalf("the job: %q, %v", state, err)
	}
}
