package pgstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestClaimOneKindRowWrittenSinceItsSnapshot: the claim of one kind
// updates the rows it locked by ctid. A row that another transaction
// wrote after the claim's snapshot, leaving it claimable, is locked in
// its newest version, which the snapshot does not see, so the claim does
// not take it. It must then leave the row claimable and report it as the
// next due job (NextRunAt and the held cursor of its priority): a claim
// that read what is left past the rows it locked instead of those it
// claimed would report nothing, and the job would wait for the next poll
// or cursor audit. The claim is stopped between its snapshot and its
// locking scans by an advisory lock that the test holds, taken in its
// first CTE (mixed, which the scans' filter reads before their first row).
func TestClaimOneKindRowWrittenSinceItsSnapshot(t *testing.T) {
	t.Parallel()
	pool, s := newPoolStore(t)
	ctx := ctxT(t)
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var params []store.InsertParams
	for i := range 3 {
		p := job("k")
		p.RunAt = base.Add(time.Duration(i) * time.Second)
		params = append(params, p)
	}
	_, err := s.Insert(ctx, params)
	require.NoError(t, err)
	written := params[0].ID // the oldest: the claim's first row

	gate := newStatementGate(t, pool, 4343)
	sql := gate.into(t, s.ClaimOneKindSQL(), ") AS yes\n), locked1", ") AS yes FROM {gate}\n), locked1")
	claimer := gate.conn

	type outcome struct {
		next    *time.Time
		held    []any
		claimed []uuid.UUID
		err     error
	}
	done := make(chan outcome, 1)
	go func() {
		var out outcome
		out.err = pgx.BeginFunc(ctx, claimer, func(tx pgx.Tx) error {
			rows, _ := tx.Query(ctx, sql, "k", int32(10), nil, "owner", int64(60e6), int64(0), int64(0))
			for rows.Next() {
				v, err := rows.Values()
				if err != nil {
					return err
				}
				if at, ok := v[2].(time.Time); ok {
					out.next = &at
				}
				out.held, _ = v[3].([]any)
				if id, ok := v[5].([16]byte); ok {
					out.claimed = append(out.claimed, id)
				}
			}
			return rows.Err()
		})
		done <- out
	}()

	// Once the claim waits for the gate, its snapshot is taken and it has
	// locked nothing: the write neither waits for it nor is seen by it.
	gate.waitAt(t, "the claim")
	_, err = pool.Exec(ctx, `UPDATE ax.jobs SET metadata = '{"written": "meanwhile"}' WHERE id = $1`, [16]byte(written))
	require.NoError(t, err)
	gate.open(t)

	out := <-done
	require.NoError(t, out.err)
	require.ElementsMatch(t, []uuid.UUID{params[1].ID, params[2].ID}, out.claimed,
		"the claimed rows: want the two not written since the claim's snapshot")
	var state string
	var runAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT state, run_at FROM ax.jobs WHERE id = $1`, [16]byte(written)).Scan(&state, &runAt))
	require.Equal(t, "scheduled", state, "the row written meanwhile")
	require.NotNil(t, out.next, "the claim reported nothing left while the row written meanwhile is due")
	require.True(t, out.next.Equal(runAt), "NextRunAt %s, want the row written meanwhile's %s", out.next, runAt)
	require.Len(t, out.held, 3)
	held, ok := out.held[store.PriorityNormal-1].(time.Time)
	require.True(t, ok && held.Equal(runAt), "held cursor of Normal %v, want %s", out.held[store.PriorityNormal-1], runAt)
}
