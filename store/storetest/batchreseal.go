package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testBatchReseal checks store.BatchResealer: the completion templates of
// the batches still running are listed, by batch ID, and a template's
// sealed values are rewritten only while the batch has not completed and
// the template still holds the values it was read with; the completion
// job inserted afterwards carries the new values.
func testBatchReseal(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.BatchResealer](t, newStore)
	// batch inserts a batch of one child, of a kind of its own, whose completion has a payload,
	// metadata and a follow-up template.
	n := 0
	batch := func(t *testing.T, st store.Store) *store.BatchParams {
		t.Helper()
		p := batchParams(t, 1)
		n++
		p.Children[0].Kind = fmt.Sprintf("child.%d", n)       // claimed alone
		p.Completion.Payload = json.RawMessage(`{"v": "k1"}`) // kept byte for byte
		p.Completion.Metadata = map[string]string{"s": "k1", "plain": "x"}
		if _, ok := st.(store.FollowUpStore); ok {
			p.Completion.FollowUps = []store.FollowUp{{On: []store.State{store.StateSucceeded},
				Job: params(t, "done.after", withPayload(`{"f":"k1"}`), withMetadata(map[string]string{"fs": "k1"}))}}
		}
		insertBatch(t, st, p)
		return p
	}
	// complete ends the batch's only child.
	complete := func(t *testing.T, st store.Store, p *store.BatchParams) {
		t.Helper()
		j := claimOnly(t, st, p.Children[0].Kind, p.Children[0].ID, longLease)
		finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeSucceeded})
		require.True(t, batchOf(t, st, p.ID).Completed)
	}
	pending := func(t *testing.T, st store.Store, after uuid.UUID, limit int) []store.PendingCompletion {
		t.Helper()
		pcs, err := as[store.BatchResealer](t, st).PendingCompletions(t.Context(), after, limit)
		require.NoError(t, err)
		return pcs
	}
	// resealRow rewrites what pc holds, k1 to k2.
	resealRow := func(pc store.PendingCompletion) store.CompletionResealParams {
		row := store.CompletionResealParams{Batch: pc.Batch, OldPayload: pc.Job.Payload, OldMetadata: pc.Job.Metadata,
			OldFollowUps: pc.Job.FollowUps, Payload: json.RawMessage(`{"v":"k2"}`), Metadata: map[string]string{"s": "k2", "plain": "x"}}
		if len(pc.Job.FollowUps) > 0 {
			fu := pc.Job.FollowUps[0]
			fu.Job.Payload, fu.Job.Metadata = json.RawMessage(`{"f":"k2"}`), map[string]string{"fs": "k2"}
			row.FollowUps = []store.FollowUp{fu}
		}
		return row
	}
	reseal := func(t *testing.T, st store.Store, rows ...store.CompletionResealParams) []bool {
		t.Helper()
		ok, err := as[store.BatchResealer](t, st).ResealCompletions(t.Context(), rows)
		require.NoError(t, err)
		return ok
	}

	t.Run("ListedByBatchPaged", func(t *testing.T) {
		st := newStore(t)
		var ps []*store.BatchParams
		for range 5 {
			ps = append(ps, batch(t, st))
		}
		complete(t, st, ps[2])
		var got []store.PendingCompletion
		after := uuid.Nil
		for {
			page := pending(t, st, after, 2)
			require.LessOrEqual(t, len(page), 2)
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			after = page[len(page)-1].Batch
		}
		require.Len(t, got, 4, "a completed batch is not listed")
		want := []*store.BatchParams{ps[0], ps[1], ps[3], ps[4]}
		slices.SortFunc(want, func(x, y *store.BatchParams) int { return bytes.Compare(x.ID[:], y.ID[:]) })
		for i, want := range want {
			pc := got[i]
			require.Equal(t, want.ID, pc.Batch)
			require.Equal(t, want.Completion.ID, pc.Job.ID)
			require.Equal(t, "done", pc.Job.Kind)
			require.Equal(t, `{"v": "k1"}`, string(pc.Job.Payload), "payload byte for byte")
			require.Equal(t, want.Completion.Metadata, pc.Job.Metadata)
			require.Len(t, pc.Job.FollowUps, len(want.Completion.FollowUps))
			for j, f := range want.Completion.FollowUps {
				require.Equal(t, string(f.Job.Payload), string(pc.Job.FollowUps[j].Job.Payload))
				require.Equal(t, f.Job.Metadata, pc.Job.FollowUps[j].Job.Metadata)
			}
		}
		require.Empty(t, pending(t, st, want[3].ID, 10))
	})

	t.Run("AppliedThenInserted", func(t *testing.T) {
		st := newStore(t)
		p := batch(t, st)
		pcs := pending(t, st, uuid.Nil, 10)
		require.Len(t, pcs, 1)
		row := resealRow(pcs[0])
		// A second row read with the same values is refused once the first
		// applied: rows apply in order.
		require.Equal(t, []bool{true, false}, reseal(t, st, row, row))
		pcs = pending(t, st, uuid.Nil, 10)
		require.Len(t, pcs, 1)
		require.Equal(t, `{"v":"k2"}`, string(pcs[0].Job.Payload))
		require.Equal(t, row.Metadata, pcs[0].Job.Metadata)
		b := batchOf(t, st, p.ID)
		require.False(t, b.Completed)
		require.Equal(t, 1, b.Pending, "the batch's counts are untouched")

		complete(t, st, p)
		done := get(t, st, p.Completion.ID)
		require.Equal(t, p.ID, done.Batch)
		require.Equal(t, "done", done.Kind)
		require.Equal(t, `{"v":"k2"}`, string(done.Payload))
		require.Equal(t, row.Metadata, done.Metadata)
		if row.FollowUps != nil {
			require.Len(t, done.FollowUps, 1)
			require.Equal(t, `{"f":"k2"}`, string(done.FollowUps[0].Job.Payload))
			require.Equal(t, map[string]string{"fs": "k2"}, done.FollowUps[0].Job.Metadata)
		}
	})

	stale := []struct {
		name   string
		change func(row *store.CompletionResealParams)
	}{
		{"StalePayload", func(row *store.CompletionResealParams) { row.OldPayload = json.RawMessage(`{"v":"k1"}`) }},
		{"StaleMetadata", func(row *store.CompletionResealParams) {
			row.OldMetadata = map[string]string{"s": "other", "plain": "x"}
		}},
		{"UnknownBatch", func(row *store.CompletionResealParams) { row.Batch = uuid.UUID{9} }},
	}
	for _, c := range stale {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			batch(t, st)
			pcs := pending(t, st, uuid.Nil, 10)
			row := resealRow(pcs[0])
			c.change(&row)
			require.Equal(t, []bool{false}, reseal(t, st, row))
			require.Equal(t, `{"v": "k1"}`, string(pending(t, st, uuid.Nil, 10)[0].Job.Payload), "a refused row wrote")
		})
	}

	t.Run("CompletedMeanwhile", func(t *testing.T) {
		st := newStore(t)
		p := batch(t, st)
		pcs := pending(t, st, uuid.Nil, 10)
		complete(t, st, p) // between the read and the write
		require.Equal(t, []bool{false}, reseal(t, st, resealRow(pcs[0])))
		done := get(t, st, p.Completion.ID)
		require.Equal(t, `{"v": "k1"}`, string(done.Payload), "the inserted job keeps what it was inserted with")
		require.Empty(t, pending(t, st, uuid.Nil, 10))
	})

	t.Run("Invalid", func(t *testing.T) {
		st := newStore(t)
		br := as[store.BatchResealer](t, st)
		for _, row := range []store.CompletionResealParams{
			{OldPayload: []byte(`1`), Payload: []byte(`2`)},
			{Batch: uuid.UUID{1}, OldPayload: []byte(`1`)},
			{Batch: uuid.UUID{1}, OldPayload: []byte(`1`), Payload: []byte(`2`), Metadata: map[string]string{"": "x"}},
		} {
			_, err := br.ResealCompletions(t.Context(), []store.CompletionResealParams{row})
			require.ErrorIs(t, err, store.ErrInvalidParams)
		}
		for _, limit := range []int{0, store.MaxListLimit + 1} {
			_, err := br.PendingCompletions(t.Context(), uuid.Nil, limit)
			require.ErrorIs(t, err, store.ErrInvalidParams)
		}
		ok, err := br.ResealCompletions(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, ok)
	})
}
