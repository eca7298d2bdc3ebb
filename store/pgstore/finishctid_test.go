package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestFinishRowWrittenSinceItsSnapshot: the finish statements write the
// rows they locked by tuple ID (finishEndSQL). A job that another
// transaction wrote after the statement's snapshot (a heartbeat's
// extension of the same lease) is locked in its newest version, which
// that snapshot does not see, so its tuple ID reaches nothing: its
// outcome must still apply, once, through the primary key. A finish that
// wrote only by tuple ID would report the outcome not applied and leave
// the job running until its lease lapsed.
//
// FinishFlow waits for the row lock that the extension's open
// transaction holds; the plain Finish statement skips locked rows, so it
// is stopped between its snapshot and its locks by an advisory lock the
// test holds, taken in its input CTE, while the extension commits.
func TestFinishRowWrittenSinceItsSnapshot(t *testing.T) {
	t.Parallel()
	outcomes := []struct {
		name    string
		outcome store.Outcome
		state   string // the job's state after the finish
		table   string // where the job is then
	}{
		{"succeeded, leaves jobs", store.OutcomeSucceeded, "succeeded", "history"},
		{"retry, stays", store.OutcomeRetry, "retrying", "jobs"},
	}
	ways := []struct {
		name   string
		finish func(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, f store.FinishParams) bool
	}{
		{"FinishFlow", finishFlowAfterExtension},
		{"Finish", finishAfterExtension},
	}
	s, pool := historyStore(t)
	for _, w := range ways {
		for _, o := range outcomes {
			t.Run(w.name+"/"+o.name, func(t *testing.T) {
				ctx := ctxT(t)
				kind := fmt.Sprintf("written-%s-%d", w.name, o.outcome) // a kind per subtest: claimOne takes its one job
				p := job(kind)
				_, err := s.Insert(ctx, []store.InsertParams{p})
				require.NoError(t, err)
				lease := claimOne(t, s, kind)
				applied := w.finish(t, s, pool, store.FinishParams{Lease: lease, Outcome: o.outcome, Error: "e", Delay: time.Hour})
				require.True(t, applied, "the outcome of a job extended since the statement's snapshot did not apply")
				require.Equal(t, o.table, where(t, pool, p.ID))
				j, err := s.Get(ctx, p.ID)
				require.NoError(t, err)
				require.Equal(t, o.state, string(j.State))
			})
		}
	}
}

// extensionSQL is what ExtendLeases writes to a running job: a new row
// version, under the same lease.
const extensionSQL = `UPDATE ax.jobs SET lease_expires_at = now() + interval '1 hour' WHERE id = $1 AND lease_token = $2`

// extend writes f's job's extension in q (a pool or an open transaction).
func extend(t *testing.T, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, f store.FinishParams) {
	tag, err := q.Exec(ctxT(t), extensionSQL, [16]byte(f.Lease.ID), [16]byte(f.Lease.Token))
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the extension found no running job under the lease")
}

// finishFlowAfterExtension runs FinishFlow while an extension of the job
// is in an open transaction, and commits it once FinishFlow waits for its
// lock.
func finishFlowAfterExtension(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, f store.FinishParams) bool {
	ctx := ctxT(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	extend(t, tx, f) // tx holds the row until it commits
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))

	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.FinishFlow(ctx, []store.FinishParams{f})
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{ok: res.OK[0]}
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1 = ANY (pg_blocking_pids(pid)))`, holder).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "FinishFlow never waited for the extension's lock")
	require.NoError(t, tx.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	return r.ok
}

// finishAfterExtension runs the plain Finish statement, stopped at a gate
// after its snapshot, commits an extension of the job, and opens the gate.
func finishAfterExtension(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, f store.FinishParams) bool {
	ctx := ctxT(t)
	gate := newStatementGate(t, pool, 4344)
	sql := gate.into(t, s.BatchSQL()["finish"], "\tFROM unnest($1::uuid[]", "\tFROM {gate}, unnest($1::uuid[]")
	finisher := gate.conn
	lo, hi := historyToday(ctx, t, finisher.Conn())

	type result struct {
		applied, busy bool
		err           error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		rows, _ := finisher.Query(ctx, sql, [][16]byte{f.Lease.ID}, [][16]byte{f.Lease.Token},
			[]int32{int32(f.Outcome)}, []int64{f.Delay.Microseconds()}, []string{f.Error}, "ax", lo, hi)
		for rows.Next() {
			var id, token [16]byte
			var busy bool
			if r.err = rows.Scan(&id, &token, &busy); r.err != nil {
				break
			}
			r.applied, r.busy = r.applied || !busy, r.busy || busy
		}
		rows.Close()
		if r.err == nil {
			r.err = rows.Err()
		}
		done <- r
	}()
	gate.waitAt(t, "the finish")
	extend(t, pool, f) // committed: the row's newest version is one the statement's snapshot does not see
	gate.open(t)
	r := <-done
	require.NoError(t, r.err)
	require.False(t, r.busy, "the finish reported the row busy: nothing held it when it locked")
	return r.applied
}
