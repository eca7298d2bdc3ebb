package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
)

// The kind of the held-transaction scenario (txhold_test.go in the suite),
// registered only with -txhold: its handler writes its business row to
// tx_rows, completes its job with CompleteTx in the same transaction, and
// then keeps the transaction open for hold_ms before it commits (the
// natural pattern: complete, more business writes, commit), holding the
// job's row locked all along.
//
// Stdout lines, for the suite to act on:
//
//	TXHELD <job id> <attempt>       CompleteTx applied; the transaction is held open
//	TXCOMMITTED <job id> <attempt>  the row and the success committed

// txHoldPayload is the payload of "txhold" jobs.
type txHoldPayload struct {
	// HoldMS is how long the transaction stays open after CompleteTx.
	HoldMS int `json:"hold_ms"`
}

// registerTxHold registers txhold.
func registerTxHold(s *ax.Scheduler, pool *pgxpool.Pool, node string) error {
	return ax.Handle(s, "txhold", func(ctx context.Context, j *ax.Job, p txHoldPayload) error {
		return txHold(ctx, s, pool, node, j, time.Duration(p.HoldMS)*time.Millisecond)
	}, ax.Timeout(time.Minute))
}

// txHold writes a row, completes the job in the same transaction, holds
// the transaction open for hold, then commits. A cancelled handler (its
// lease reported lost) rolls back and returns the cause, so the suite sees
// the loss as an EVENT line and no committed row.
func txHold(ctx context.Context, s *ax.Scheduler, pool *pgxpool.Pool, node string, j *ax.Job, hold time.Duration) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO tx_rows (job_id, node, attempt) VALUES ($1, $2, $3)`, [16]byte(j.ID), node, j.Attempt); err != nil {
		return err
	}
	if err := s.CompleteTx(ctx, tx); err != nil {
		return err
	}
	say("TXHELD %s %d", j.ID, j.Attempt)
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	say("TXCOMMITTED %s %d", j.ID, j.Attempt)
	return nil
}
