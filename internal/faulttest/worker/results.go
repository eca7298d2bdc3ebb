package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
)

// The kinds of the results and batches scenarios (results_test.go in the
// suite). They write to tables the scenarios create:
//
//	tx_rows      (job_id, node, attempt): txwork's business write
//	completions  (job_id, node, attempt, children, results, sum, started_at):
//	             what batchdone saw, written with its success
//
// Stdout lines of txwork, for the suite to act on:
//
//	TXWRITTEN <job id> <attempt>    the business row is written, not committed
//	TXREFUSED <job id> <reason>     CompleteTx failed ("lease_lost": fenced)
//	TXCOMMITTED <job id> <attempt>  the row and the success committed

// txPayload is the payload of "txwork" jobs.
type txPayload struct {
	// HoldMS is how long the handler waits between its write and
	// CompleteTx on the attempts listed in HoldOn: the window in which the
	// suite kills or pauses the process.
	HoldMS int   `json:"hold_ms"`
	HoldOn []int `json:"hold_on"`
}

// childPayload is the payload of "child" jobs.
type childPayload struct {
	N int `json:"n"`
	// MS is how long the handler works, so that a killed process has
	// children in flight.
	MS int `json:"ms"`
}

// childResult is the result of "child" jobs.
type childResult struct {
	N    int    `json:"n"`
	Node string `json:"node"`
}

// registerResults registers txwork, child and batchdone.
func registerResults(s *ax.Scheduler, pool *pgxpool.Pool, node string) error {
	err := ax.Handle(s, "txwork", func(ctx context.Context, j *ax.Job, p txPayload) error {
		return txWork(ctx, s, pool, node, j, p)
	})
	if err != nil {
		return err
	}
	err = ax.HandleResult(s, "child", func(ctx context.Context, _ *ax.Job, p childPayload) (childResult, error) {
		t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return childResult{}, context.Cause(ctx)
		}
		return childResult{N: p.N, Node: node}, nil
	})
	if err != nil {
		return err
	}
	return ax.Handle(s, "batchdone", func(ctx context.Context, j *ax.Job, _ json.RawMessage) error {
		return batchDone(ctx, s, pool, node, j)
	})
}

// txWork writes a row and completes the job in one transaction. The
// database calls ignore the handler's cancellation (a context without
// cancel, keeping the handler's values), so that a paused and resumed
// process reaches CompleteTx and is refused by the lease fence, not by a
// cancelled context.
func txWork(ctx context.Context, s *ax.Scheduler, pool *pgxpool.Pool, node string, j *ax.Job, p txPayload) error {
	dbctx := context.WithoutCancel(ctx)
	tx, err := pool.Begin(dbctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(dbctx) }()
	if _, err := tx.Exec(dbctx, `INSERT INTO tx_rows (job_id, node, attempt) VALUES ($1, $2, $3)`, [16]byte(j.ID), node, j.Attempt); err != nil {
		return err
	}
	say("TXWRITTEN %s %d", j.ID, j.Attempt)
	for _, a := range p.HoldOn {
		if a == j.Attempt {
			time.Sleep(time.Duration(p.HoldMS) * time.Millisecond)
		}
	}
	if err := s.CompleteTx(dbctx, tx); err != nil {
		reason := err.Error()
		if errors.Is(err, ax.ErrLeaseLost) {
			reason = "lease_lost"
		}
		say("TXREFUSED %s %s", j.ID, reason)
		return err
	}
	if err := tx.Commit(dbctx); err != nil {
		return err
	}
	say("TXCOMMITTED %s %d", j.ID, j.Attempt)
	return nil
}

// batchDone reads every child of its batch and records, in the same
// transaction as its own success, how many there were, how many had a
// result and the sum of the results' N.
func batchDone(ctx context.Context, s *ax.Scheduler, pool *pgxpool.Pool, node string, j *ax.Job) error {
	var children, results, sum int
	after := uuid.Nil
	for {
		page, err := s.BatchChildren(ctx, j.Batch, after, 1000)
		if err != nil {
			return err
		}
		for _, c := range page {
			children++
			if c.State != ax.StateSucceeded || c.Result == nil {
				continue
			}
			var r childResult
			if err := json.Unmarshal(c.Result, &r); err != nil {
				return fmt.Errorf("child %s result: %w", c.ID, err)
			}
			results++
			sum += r.N
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO completions (job_id, node, attempt, children, results, sum, started_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, [16]byte(j.ID), node, j.Attempt, children, results, sum, j.StartedAt); err != nil {
		return err
	}
	if err := s.CompleteTx(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
