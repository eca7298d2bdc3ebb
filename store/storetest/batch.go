package storetest

import (
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// batchParams returns a batch of n children of kind "child" and a
// completion of kind "done".
func batchParams(t *testing.T, n int) *store.BatchParams {
	t.Helper()
	p := &store.BatchParams{ID: newID(t), Completion: params(t, "done")}
	for range n {
		p.Children = append(p.Children, params(t, "child", withMaxAttempts(1)))
	}
	return p
}

func insertBatch(t *testing.T, st store.Store, p *store.BatchParams) *store.BatchResult {
	t.Helper()
	res, err := as[store.BatchStore](t, st).InsertBatch(t.Context(), p)
	require.NoError(t, err)
	require.Len(t, res.Children, len(p.Children))
	return res
}

func batchOf(t *testing.T, st store.Store, id uuid.UUID) *store.BatchRecord {
	t.Helper()
	b, err := as[store.BatchStore](t, st).Batch(t.Context(), id)
	require.NoError(t, err)
	return b
}

// testBatches checks BatchStore: children inserted with their batch, the
// completion job inserted once, by whatever ends the last child.
func testBatches(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.BatchStore](t, newStore)

	t.Run("CompletionAfterLastChild", func(t *testing.T) {
		st := newStore(t)
		p := batchParams(t, 5)
		insertBatch(t, st, p)
		for _, c := range p.Children {
			require.Equal(t, p.ID, get(t, st, c.ID).Batch)
		}
		b := batchOf(t, st, p.ID)
		require.Equal(t, store.BatchRecord{ID: p.ID, Total: 5, Pending: 5, Completion: p.Completion.ID, CreatedAt: b.CreatedAt}, *b)

		res := claim(t, st, claimParams(10, shortLease, "child"))
		require.Len(t, res.Jobs, 5)
		outcomes := []store.Outcome{store.OutcomeSucceeded, store.OutcomeSucceeded, store.OutcomeDead, store.OutcomeCancelled}
		for i, o := range outcomes {
			finishOne(t, st, res.Jobs[i], store.FinishParams{Outcome: o, Error: "e"})
			requireNotFound(t, st, p.Completion.ID)
		}
		b = batchOf(t, st, p.ID)
		require.Equal(t, []int{2, 1, 1, 1}, []int{b.Succeeded, b.Dead, b.Cancelled, b.Pending})
		require.False(t, b.Completed)

		// The last child's lease expires: its rescue ends it (dead, its only
		// attempt used) and so completes the batch.
		waitUntilStoreTime(t, st, res.Jobs[4].LeaseExpiresAt)
		rescue(t, st, 10, 1)
		b = batchOf(t, st, p.ID)
		require.True(t, b.Completed)
		require.Equal(t, []int{2, 2, 1, 0}, []int{b.Succeeded, b.Dead, b.Cancelled, b.Pending})
		done := get(t, st, p.Completion.ID)
		require.Equal(t, store.StateScheduled, done.State)
		require.Equal(t, p.ID, done.Batch)
		require.Equal(t, "done", done.Kind)
		require.False(t, done.CreatedAt.Before(b.CompletedAt.Add(-clockTolerance)))
	})

	t.Run("CompletesOnceUnderConcurrentEnds", func(t *testing.T) {
		st := newStore(t)
		p := batchParams(t, 200)
		insertBatch(t, st, p)
		res := claim(t, st, claimParams(200, longLease, "child"))
		require.Len(t, res.Jobs, 200)
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for w := range 20 {
			wg.Go(func() {
				var ps []store.FinishParams
				for i := w; i < len(res.Jobs); i += 20 {
					ps = append(ps, store.FinishParams{Lease: lease(res.Jobs[i]), Outcome: store.OutcomeSucceeded})
				}
				for _, fp := range ps { // one at a time: many transactions race for the last end
					if _, err := st.Finish(t.Context(), []store.FinishParams{fp}); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		b := batchOf(t, st, p.ID)
		require.True(t, b.Completed)
		require.Equal(t, 200, b.Succeeded)
		require.Len(t, claim(t, st, claimParams(10, longLease, "done")).Jobs, 1, "one completion job")
	})

	t.Run("ChildrenPaged", func(t *testing.T) {
		st := newStore(t)
		p := batchParams(t, 7)
		insertBatch(t, st, p)
		bs := as[store.BatchStore](t, st)
		var seen []uuid.UUID
		after := uuid.Nil
		for {
			page, err := bs.BatchChildren(t.Context(), p.ID, after, 3)
			require.NoError(t, err)
			for _, c := range page {
				seen = append(seen, c.ID)
			}
			if len(page) < 3 {
				break
			}
			after = page[len(page)-1].ID
		}
		var want []uuid.UUID
		for _, c := range p.Children {
			want = append(want, c.ID)
		}
		require.ElementsMatch(t, want, seen)
		require.IsIncreasing(t, idStrings(seen))
	})

	t.Run("Cancel", func(t *testing.T) {
		st := newStore(t)
		p := batchParams(t, 4)
		insertBatch(t, st, p)
		res := claim(t, st, claimParams(1, longLease, "child"))
		require.Len(t, res.Jobs, 1)
		running := res.Jobs[0]
		n, err := as[store.BatchStore](t, st).CancelBatch(t.Context(), p.ID)
		require.NoError(t, err)
		require.Equal(t, 4, n, "three cancelled, one asked to stop")
		for _, c := range p.Children {
			if c.ID != running.ID {
				require.Equal(t, store.StateCancelled, get(t, st, c.ID).State)
			}
		}
		require.True(t, get(t, st, running.ID).CancelRequested)
		requireNotFound(t, st, p.Completion.ID)
		finishOne(t, st, running, store.FinishParams{Outcome: store.OutcomeCancelled, Error: "cancelled"})
		b := batchOf(t, st, p.ID)
		require.True(t, b.Completed)
		require.Equal(t, 4, b.Cancelled)
		get(t, st, p.Completion.ID)
	})

	t.Run("AllDuplicatesStoreNothing", func(t *testing.T) {
		// A batch with no child to wait for would complete at once, before
		// the jobs holding its children's keys have ended: it is not
		// stored, and its completion job never runs.
		st := newStore(t)
		held := insertOne(t, st, "child", withUniqueKey("k1"))
		p := batchParams(t, 1)
		p.Children[0].UniqueKey = "k1"
		res := insertBatch(t, st, p)
		require.True(t, res.Children[0].Duplicate)
		require.Equal(t, held, res.Children[0].ID)
		_, err := as[store.BatchStore](t, st).Batch(t.Context(), p.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "a batch of duplicates was stored")
		requireNotFound(t, st, p.Completion.ID)
	})

	t.Run("RetriedChildReopens", func(t *testing.T) {
		// Issue 40: a dead child retried after its batch completed left the
		// completion as it was ("1 delivered, 2 dead" after both were
		// delivered). The retry reopens the batch; its next completion
		// inserts the completion job again, under a fresh ID.
		st := newStore(t)
		p := batchParams(t, 2)
		insertBatch(t, st, p)
		res := claim(t, st, claimParams(2, longLease, "child"))
		require.Len(t, res.Jobs, 2)
		ok, dead := res.Jobs[0], res.Jobs[1]
		finishOne(t, st, ok, store.FinishParams{Outcome: store.OutcomeSucceeded})
		finishOne(t, st, dead, store.FinishParams{Outcome: store.OutcomeDead, Error: "e"})
		b := batchOf(t, st, p.ID)
		require.True(t, b.Completed)
		first := get(t, st, p.Completion.ID)

		control(t, st, dead.ID, store.OpRunNow)
		b = batchOf(t, st, p.ID)
		require.Equal(t, store.BatchRecord{ID: p.ID, Total: 2, Succeeded: 1, Pending: 1, Completion: p.Completion.ID,
			CreatedAt: b.CreatedAt}, *b, "the retry reopened the batch")

		res = claim(t, st, claimParams(2, longLease, "child"))
		require.Len(t, res.Jobs, 1)
		require.Equal(t, dead.ID, res.Jobs[0].ID)
		finishOne(t, st, res.Jobs[0], store.FinishParams{Outcome: store.OutcomeSucceeded})
		b = batchOf(t, st, p.ID)
		require.True(t, b.Completed)
		require.False(t, b.CompletedAt.IsZero())
		require.Equal(t, []int{2, 0, 0, 0}, []int{b.Succeeded, b.Dead, b.Cancelled, b.Pending})
		require.Equal(t, p.Completion.ID, b.Completion, "Completion names the first completion job")

		dones := claim(t, st, claimParams(10, longLease, "done")).Jobs
		require.Len(t, dones, 2, "the completion job inserted again")
		var again *store.JobRecord
		for _, d := range dones {
			if d.ID != first.ID {
				again = d
			}
		}
		require.NotNil(t, again)
		require.Equal(t, p.ID, again.Batch)
		require.Equal(t, dead.ID, again.Parent, "the child whose end completed the batch")

		// Completion jobs are not children: not listed, not cancelled,
		// their ends not counted.
		kids, err := as[store.BatchStore](t, st).BatchChildren(t.Context(), p.ID, uuid.Nil, 10)
		require.NoError(t, err)
		require.Len(t, kids, 2)
		require.ElementsMatch(t, []uuid.UUID{ok.ID, dead.ID}, []uuid.UUID{kids[0].ID, kids[1].ID})
		n, err := as[store.BatchStore](t, st).CancelBatch(t.Context(), p.ID)
		require.NoError(t, err)
		require.Zero(t, n)
		for _, d := range dones {
			finishOne(t, st, d, store.FinishParams{Outcome: store.OutcomeDead, Error: "e"})
		}
		b = batchOf(t, st, p.ID)
		require.Equal(t, []int{2, 0, 0, 0}, []int{b.Succeeded, b.Dead, b.Cancelled, b.Pending})
		require.Len(t, claim(t, st, claimParams(10, longLease, "done")).Jobs, 0, "no third completion")
	})

	t.Run("Errors", func(t *testing.T) {
		st := newStore(t)
		bs := as[store.BatchStore](t, st)
		_, err := bs.Batch(t.Context(), newID(t))
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = bs.InsertBatch(t.Context(), &store.BatchParams{ID: newID(t), Completion: params(t, "done")})
		require.ErrorIs(t, err, store.ErrInvalidParams, "a batch without children")
		bad := batchParams(t, 2)
		bad.Children[1].Kind = ""
		_, err = bs.InsertBatch(t.Context(), bad)
		require.ErrorIs(t, err, store.ErrInvalidParams)
		requireNotFound(t, st, bad.Children[0].ID)
		_, err = bs.Batch(t.Context(), bad.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "a refused batch left its record")
	})
}

func idStrings(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
