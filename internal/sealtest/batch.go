package sealtest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// batchHookable is what testBatchCompletion needs of a store.
type batchHookable interface {
	store.Store
	store.JobInspector
	store.Resealer
	store.BatchResealer
}

// hookedBatchResealer calls before ahead of the store's first
// ResealCompletions, as if a batch completed between the pass's read of
// its completion template and its write.
type hookedBatchResealer struct {
	batchHookable
	once   sync.Once
	before func()
}

func (h *hookedBatchResealer) ResealCompletions(ctx context.Context, rows []store.CompletionResealParams) ([]bool, error) {
	h.once.Do(h.before)
	return h.batchHookable.ResealCompletions(ctx, rows)
}

// testBatchCompletion: the completion job of a running batch, which the
// store holds as a template until the last child ends, is counted by
// KeyUsage and CheckKeyRemoval and re-sealed by Reencrypt (a plain one
// sealed with SealPlain), so that once the old key is gone from every
// ring the completion still runs, its payload, secret metadata and
// follow-up opened. A batch that completes between the pass's read and
// write keeps its template (Changed), and its completion job is re-sealed
// among the jobs.
func testBatchCompletion(t *testing.T, st store.Store) {
	hs, ok := st.(batchHookable)
	if !ok {
		t.Skipf("%T has no store.BatchResealer, store.Resealer or store.JobInspector", st)
	}
	ctx := t.Context()
	// batch schedules a batch whose completion has secret metadata (plain
	// metadata without a ring) and a follow-up.
	batch := func(s *ax.Scheduler, keys bool, children int, n int) *ax.BatchResult {
		t.Helper()
		md := ax.Metadata(map[string]string{"tok": "t"})
		if keys {
			md = ax.SecretMetadata(map[string]string{"tok": "t"})
		}
		b := ax.Batch{Completion: ax.Request{Kind: "seal.bdone", Payload: payload{Email: secret, N: n}, Options: []ax.ScheduleOption{
			md, ax.FollowUp([]ax.State{ax.StateSucceeded}, "seal.bafter", payload{Email: secret, N: n + 1}),
		}}}
		for i := range children {
			b.Children = append(b.Children, ax.Request{Kind: "seal.bchild", Payload: payload{Email: secret, N: i}})
		}
		res, err := s.ScheduleBatch(ctx, b)
		require.NoError(t, err)
		return res
	}
	sealed := newScheduler(t, st, Ring(t, k1))
	running := batch(sealed, true, 3, 100) // runs to its end after the rotation
	racing := batch(sealed, true, 1, 200)  // completes between the pass's read and write
	plain := batch(newScheduler(t, st, nil), false, 1, 300)
	_, err := st.Get(ctx, running.Completion)
	require.ErrorIs(t, err, store.ErrNotFound, "a running batch's completion job is not a job yet")

	ring := Ring(t, k2, k1)
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	// Before the pass: k1 seals 4 jobs (the children) and 2 completions.
	usage, _, err := admin.KeyUsage(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k1": 4 + 2}, usage, "KeyUsage counts running batches' completion jobs as jobs")
	uses, err := admin.KeyUses(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]ax.KeyUses{"k1": {Jobs: 4, Batches: 2}}, uses)
	err = admin.CheckKeyRemoval(ctx, "k1")
	var inUse *ax.KeyInUseError
	require.ErrorAs(t, err, &inUse)
	require.ErrorIs(t, err, ax.ErrKeyInUse)
	require.Equal(t, ax.KeyInUseError{KeyID: "k1", Jobs: 4, Batches: 2}, *inUse)
	require.Contains(t, err.Error(), "4 job(s), 0 schedule template(s) and 2 completion job(s) of running batches")

	hooked := &hookedBatchResealer{batchHookable: hs, before: func() {
		// The racing batch's child is cancelled: the batch completes, and its
		// completion job (sealed with k1) is inserted.
		_, err := sealed.CancelBatch(ctx, racing.ID)
		require.NoError(t, err)
	}}
	pass, err := ax.NewAdmin(ax.AdminConfig{Store: hooked, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	prog, err := pass.Reencrypt(ctx, ax.ReencryptOptions{SealPlain: true, SecretMetadata: []string{"tok"}})
	require.NoError(t, err)
	// 3 completion templates (1 changed meanwhile, 1 plain), then 6 jobs:
	// 5 children and the racing batch's completion job.
	require.Equal(t, ax.ReencryptProgress{Scanned: 3 + 6, Resealed: 2 + 6, Sealed: 1 + 1, Changed: 1, Last: prog.Last}, prog)
	b, err := sealed.Batch(ctx, racing.ID)
	require.NoError(t, err)
	require.True(t, b.Completed)
	rec, err := st.Get(ctx, racing.Completion)
	require.NoError(t, err)
	requireSealed(t, rec.Payload, "k2")

	uses, err = admin.KeyUses(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]ax.KeyUses{"k2": {Jobs: 6, Batches: 2}}, uses)
	require.NoError(t, admin.CheckKeyRemoval(ctx, "k1"))
	again, err := admin.Reencrypt(ctx, ax.ReencryptOptions{SealPlain: true, SecretMetadata: []string{"tok"}})
	require.NoError(t, err)
	require.Zero(t, again.Resealed+again.Changed, "%+v", again)

	// k1 leaves every ring: the batches end, and every completion job
	// runs with its payload and secret metadata opened.
	worker := newScheduler(t, st, Ring(t, k2))
	g := newGot()
	for _, kind := range []string{"seal.bchild", "seal.bdone", "seal.bafter"} {
		require.NoError(t, ax.HandleResult(worker, kind, g.handler()))
	}
	require.NoError(t, worker.Start(ctx))
	for _, c := range []struct {
		res *ax.BatchResult
		n   int
	}{{running, 100}, {racing, 200}, {plain, 300}} {
		for _, ch := range c.res.Children {
			require.NotEqual(t, store.StateDead, waitFinal(t, st, ch.ID).State)
		}
		done := waitFinal(t, st, c.res.Completion)
		require.Equal(t, store.StateSucceeded, done.State, "batch %d: %+v", c.n, done.Errors)
		requireSealed(t, done.Payload, "k2")
		p, md := g.get(c.res.Completion)
		require.Equal(t, payload{Email: secret, N: c.n}, p)
		require.Equal(t, "t", md["tok"])
		after, err := worker.Admin().FollowUps(ctx, c.res.Completion)
		require.NoError(t, err)
		require.Len(t, after, 1)
		rec := waitFinal(t, st, after[0].ID)
		require.Equal(t, store.StateSucceeded, rec.State, "batch %d follow-up: %+v", c.n, rec.Errors)
		fp, _ := g.get(after[0].ID)
		require.Equal(t, payload{Email: secret, N: c.n + 1}, fp)
	}
	b, err = worker.Batch(ctx, running.ID)
	require.NoError(t, err)
	require.Equal(t, 3, b.Succeeded)
}
