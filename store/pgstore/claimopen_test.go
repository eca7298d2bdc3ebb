package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestOpenClaimStepsOverHeldRows: beside another claim in flight that
// holds the 50 oldest jobs (a transaction left open), a claim of 25 with
// no spare rows loses its first choices and its second round takes the
// next 25; it learns from that, and the next claim takes the 25 after
// them in its one statement, stepping over the held rows. Once the other
// claim ends, claims take the oldest jobs first again, and the spare rows
// decay to none.
func TestOpenClaimStepsOverHeldRows(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	tracer := &batchTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := pgstore.New(ctx, pool)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	// 200 due jobs, each a millisecond older than the next: ids in
	// claim order.
	base := time.Now().Add(-time.Minute)
	jobs := make([]store.InsertParams, 200)
	order := make([]uuid.UUID, len(jobs))
	for i := range jobs {
		jobs[i] = job("a")
		jobs[i].RunAt = base.Add(time.Duration(i) * time.Millisecond)
		order[i] = jobs[i].ID
	}
	_, err = s.Insert(ctx, jobs)
	require.NoError(t, err)

	held, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Rollback(context.Background()) })
	tag, err := held.Exec(ctx, `SELECT 1 FROM ax.jobs WHERE id = ANY ($1) FOR UPDATE`, order[:50])
	require.NoError(t, err)
	require.EqualValues(t, 50, tag.RowsAffected())

	params := &store.ClaimParams{Owner: "n", Limit: 25, LeaseDuration: time.Minute,
		Kinds: []store.KindLimit{{Kind: "a", Limit: 25}}}
	claimed := map[uuid.UUID]bool{}
	claim := func() []uuid.UUID {
		t.Helper()
		res, err := s.Claim(ctx, params)
		require.NoError(t, err)
		ids := make([]uuid.UUID, len(res.Jobs))
		for i, j := range res.Jobs {
			ids[i] = j.ID
			require.False(t, claimed[j.ID], "job %s claimed twice", j.ID)
			claimed[j.ID] = true
		}
		return ids
	}
	secondRounds := func() int { return tracer.together(s.ClaimLostSQL(), s.ClaimLostSQL()) }

	require.Equal(t, order[50:75], claim(), "the first claim, beside the held rows")
	require.Equal(t, 1, secondRounds(), "the first claim's second round")
	require.Positive(t, s.ClaimSpare(), "spare rows after stepping over held ones")

	require.Equal(t, order[75:100], claim(), "the second claim, beside the held rows")
	require.Equal(t, 1, secondRounds(), "the second claim stepped over the held rows in its statement")

	require.NoError(t, held.Rollback(ctx))
	require.Equal(t, order[:25], claim(), "the oldest first once the other claim ended")
	for range 20 {
		if s.ClaimSpare() == 0 {
			break
		}
		claim()
	}
	require.Zero(t, s.ClaimSpare(), "spare rows of a claim alone")
	require.Equal(t, 1, secondRounds())
	var running int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs WHERE state = 'running'`).Scan(&running))
	require.Equal(t, len(claimed), running)
}
