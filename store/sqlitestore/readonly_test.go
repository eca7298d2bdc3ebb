package sqlitestore_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// TestOpenReadOnly: a read-only Store opens a file another Store holds,
// sees its committed jobs and flows, and refuses every write; a missing
// file is an error, not a new file.
func TestOpenReadOnly(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "ax.db")
	_, err := sqlitestore.OpenReadOnly(ctx, path)
	require.Error(t, err, "no file yet")
	require.NoFileExists(t, path)

	st, err := sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	defer st.Close()
	p := job("k", "", store.UniqueScope{})
	insertOne(t, st, p)
	require.NoError(t, st.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{{Kind: "k", Concurrency: 2}}}))

	ro, err := sqlitestore.OpenReadOnly(ctx, path)
	require.NoError(t, err)
	defer ro.Close()
	rec, err := ro.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, rec.State)
	flows, err := ro.Flows(ctx)
	require.NoError(t, err)
	require.Len(t, flows, 1)
	require.Equal(t, 2, flows[0].Config.Concurrency)

	_, err = ro.Insert(ctx, []store.InsertParams{job("k", "", store.UniqueScope{})})
	require.ErrorIs(t, err, sqlitestore.ErrReadOnly)
	_, err = ro.Control(ctx, p.ID, store.OpCancel)
	require.ErrorIs(t, err, sqlitestore.ErrReadOnly)

	insertOne(t, st, job("k", "", store.UniqueScope{}))
	counts, err := ro.CountJobs(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.StateCount{{Kind: "k", State: store.StateScheduled, Count: 2}}, counts, "the holder's later commits are seen")
}

// TestReadOnlyErrorSaysItOnce: a change refused by a read-only Store,
// through ax.Admin.OpenBreaker, names what was asked once (issue 40: "open breaker of
// \"k\": open breaker of \"k\": ax/sqlitestore: store opened read-only").
func TestReadOnlyErrorSaysItOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "ax.db")
	st, err := sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{{Kind: "k",
		Breaker: store.BreakerConfig{Failures: 5, CoolDown: time.Minute, MaxCoolDown: time.Hour}}}}))
	ro, err := sqlitestore.OpenReadOnly(ctx, path)
	require.NoError(t, err)
	defer ro.Close()
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: ro})
	require.NoError(t, err)
	_, err = admin.OpenBreaker(ctx, "k")
	require.ErrorIs(t, err, sqlitestore.ErrReadOnly)
	require.Equal(t, `open breaker of "k": set breaker: `+sqlitestore.ErrReadOnly.Error(), err.Error())
}
