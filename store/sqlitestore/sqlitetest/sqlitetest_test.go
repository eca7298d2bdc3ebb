package sqlitetest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
	"github.com/axsched/ax/store/sqlitestore/sqlitetest"
)

type WelcomeArgs struct {
	To string `json:"to"`
}

func (WelcomeArgs) Kind() string { return "email.welcome" }

// signup is the code under test: a user row and its welcome mail, in one
// transaction.
func signup(ctx context.Context, db *sql.DB, s *ax.Scheduler, email string, commit bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO users (email) VALUES (?)`, email); err != nil {
		return err
	}
	if _, err := ax.EnqueueTx(ctx, s, tx, WelcomeArgs{To: email}, ax.In(10*time.Minute)); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// TestNewScheduler: jobs scheduled in the test's transactions exist only
// if they commit, run inline on the test's clock, and a handler completes
// its job in its own transaction with its row.
func TestNewScheduler(t *testing.T) {
	s, db, clock := sqlitetest.NewScheduler(t, ax.Config{})
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `CREATE TABLE users (email TEXT PRIMARY KEY, welcomed INTEGER NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	require.NoError(t, ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, a WelcomeArgs) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // no-op after Commit
		if _, err := tx.ExecContext(ctx, `UPDATE users SET welcomed = 1 WHERE email = ?`, a.To); err != nil {
			return err
		}
		if err := ax.CompleteTxOf(ctx, s, tx); err != nil {
			return err
		}
		return tx.Commit()
	}, ax.CompletesInTx[*sql.Tx]()))

	require.NoError(t, signup(ctx, db, s, "ada@example.com", true))
	require.NoError(t, signup(ctx, db, s, "grace@example.com", false))
	j := axtest.RequireScheduled[WelcomeArgs](t, s, axtest.RunAt(axtest.Epoch.Add(10*time.Minute)))
	require.Equal(t, "ada@example.com", j.Args.To, "the rolled-back signup scheduled nothing")

	require.Zero(t, axtest.Work(t, s), "not due before the clock moves")
	clock.Advance(10 * time.Minute)
	require.Equal(t, 1, axtest.Work(t, s))
	axtest.RequireScheduled[WelcomeArgs](t, s, axtest.State(ax.StateSucceeded))
	var welcomed int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT welcomed FROM users WHERE email = ?`, "ada@example.com").Scan(&welcomed))
	require.Equal(t, 1, welcomed, "the handler's write committed with its job's success")
}

// TestStoreIsTheTests: each test gets a file of its own.
func TestStoreIsTheTests(t *testing.T) {
	a, b := sqlitetest.Store(t), sqlitetest.Store(t)
	require.NotEqual(t, a.Path(), b.Path())
}
