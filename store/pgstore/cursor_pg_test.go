package pgstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestClaimCursorsMissNothing: with a listener on, claims scan from
// cursors, yet a job made claimable below a cursor is claimed at once: a
// transaction that read now() before a claim and committed after it (its
// notification lowers the cursor), and a job inserted with a run_at in
// the past. A row written by hand, without a notification, below the
// cursor is skipped (the cursor is in use) until the next audit, which a
// claim starts beside itself and the claims after it see.
func TestClaimCursorsMissNothing(t *testing.T) {
	t.Parallel()
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	s.SetCursorAuditEvery(time.Hour)
	var heard atomic.Int64
	unsubscribe := s.Subscribe(func(store.Notification) { heard.Add(1) })
	defer unsubscribe()
	waitHeard := func(n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return heard.Load() >= n }, 10*time.Second, 5*time.Millisecond)
	}
	insert := func(p store.InsertParams) {
		t.Helper()
		n := heard.Load()
		_, err := s.Insert(ctx, []store.InsertParams{p})
		require.NoError(t, err)
		waitHeard(n + 1)
	}
	claimOne := func() []*store.JobRecord { return claimKind(t, s, "cur", 10) }

	// A claim sets the cursors.
	insert(job("cur"))
	require.Len(t, claimOne(), 1)

	// A transaction reads now() (its run_at), a later job is inserted
	// and claimed, moving the cursor past it; then it commits.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	late := job("cur")
	_, err = s.InsertTx(ctx, tx, []store.InsertParams{late})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	insert(job("cur"))
	require.Len(t, claimOne(), 1)
	n := heard.Load()
	require.NoError(t, tx.Commit(ctx))
	waitHeard(n + 1)
	got := claimOne()
	require.Len(t, got, 1, "the late transaction's job")
	require.Equal(t, late.ID, got[0].ID)

	// A job scheduled an hour in the past.
	past := job("cur")
	past.RunAt = time.Now().Add(-time.Hour)
	insert(past)
	got = claimOne()
	require.Len(t, got, 1, "the job with a past run_at")
	require.Equal(t, past.ID, got[0].ID)

	// A row made claimable by hand, without a notification: below the
	// cursor, it waits for the next audit.
	hand := job("cur")
	_, err = s.Insert(ctx, []store.InsertParams{hand})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE ax.jobs SET state = 'paused' WHERE id = $1`, [16]byte(hand.ID))
	require.NoError(t, err)
	require.Empty(t, claimOne(), "paused")
	_, err = pool.Exec(ctx, `UPDATE ax.jobs SET state = 'scheduled', run_at = now() - interval '1 minute' WHERE id = $1`, [16]byte(hand.ID))
	require.NoError(t, err)
	require.Empty(t, claimOne(), "below the cursor, not notified: skipped while cursors are in use")
	s.SetCursorAuditEvery(0)
	require.Empty(t, claimOne(), "the claim that starts an audit scans from its cursors")
	require.Eventually(t, func() bool {
		got = claimOne()
		return len(got) == 1
	}, 10*time.Second, 10*time.Millisecond, "found once an audit lowered the cursor")
	require.Equal(t, hand.ID, got[0].ID)
}

// TestClaimCursorsOffWithoutListener: without a Subscribe, every claim
// scans whole ranges, so a row written by hand below where a claim
// stopped is claimed at once.
func TestClaimCursorsOffWithoutListener(t *testing.T) {
	t.Parallel()
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	s.SetCursorAuditEvery(time.Hour)
	_, err := s.Insert(ctx, []store.InsertParams{job("cur")})
	require.NoError(t, err)
	require.Len(t, claimKind(t, s, "cur", 10), 1)
	hand := job("cur")
	hand.RunAt = time.Now().Add(time.Hour)
	_, err = s.Insert(ctx, []store.InsertParams{hand})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE ax.jobs SET run_at = now() - interval '1 minute' WHERE id = $1`, [16]byte(hand.ID))
	require.NoError(t, err)
	got := claimKind(t, s, "cur", 10)
	require.Len(t, got, 1)
	require.Equal(t, hand.ID, got[0].ID)
}
