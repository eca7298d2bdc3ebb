package pgstore_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// newStorePool returns a Store and its pool on a fresh database.
func newStorePool(t *testing.T, opts ...pgstore.Option) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	s, err := pgstore.New(context.Background(), pool, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, pool
}

// claimKind claims up to n jobs of kind with a long lease.
func claimKind(t *testing.T, s *pgstore.Store, kind string, n int) []*store.JobRecord {
	t.Helper()
	res, err := s.Claim(ctxT(t), &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: kind, Limit: n}},
		Limit: n, LeaseDuration: time.Hour})
	require.NoError(t, err)
	return res.Jobs
}

func leaseOf(j *store.JobRecord) store.Lease { return store.Lease{ID: j.ID, Token: j.LeaseToken} }

// TestCompleteTxFenced: CompleteTx applies the outcome, its result and
// Then jobs inside the caller's transaction: nothing is visible before it
// commits, and nothing remains if it rolls back (the job stays running
// under its lease). A stale lease applies nothing.
func TestCompleteTxFenced(t *testing.T) {
	t.Parallel()
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	p := job("k")
	_, err := s.Insert(ctx, []store.InsertParams{p})
	require.NoError(t, err)
	j := claimKind(t, s, "k", 1)[0]
	then := job("next")
	fp := store.FinishParams{Lease: leaseOf(j), Outcome: store.OutcomeSucceeded,
		Result: json.RawMessage(`{"rows":  3}`), Then: []store.InsertParams{then}}

	// Rolled back: as if never called.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	ok, err := s.CompleteTx(ctx, tx, fp)
	require.NoError(t, err)
	require.True(t, ok)
	got, err := s.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateRunning, got.State, "visible before commit")
	require.NoError(t, tx.Rollback(ctx))
	got, err = s.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateRunning, got.State)
	require.Nil(t, got.Result)
	_, err = s.Get(ctx, then.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	// A stale lease: refused, nothing written.
	stale := fp
	stale.Lease.Token = uuid.Must(uuid.NewV7())
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	ok, err = s.CompleteTx(ctx, tx, stale)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, tx.Rollback(ctx))

	// Committed: the success, its result and its Then job together.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	ok, err = s.CompleteTx(ctx, tx, fp)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tx.Commit(ctx))
	got, err = s.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateSucceeded, got.State)
	require.Equal(t, `{"rows":  3}`, string(got.Result))
	next, err := s.Get(ctx, then.ID)
	require.NoError(t, err)
	require.Equal(t, p.ID, next.Parent)

	_, err = s.CompleteTx(ctx, nil, fp)
	require.ErrorIs(t, err, store.ErrInvalidParams)
}

// TestFollowUpTemplateExact: a follow-up's payload is inserted byte for
// byte, with its metadata, priority and absolute run time (kept to the
// microsecond), under a UUIDv7 made by the database; the templates read
// back from Get as given.
func TestFollowUpTemplateExact(t *testing.T) {
	t.Parallel()
	s, _ := newStorePool(t)
	ctx := ctxT(t)
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond).Add(789 * time.Nanosecond)
	f := store.FollowUp{On: []store.State{store.StateSucceeded}, Job: store.InsertParams{Kind: "after",
		Payload: json.RawMessage("{ \"b\":1,  \"a\" : [1.50, \"\\u00e9\"] }"), Metadata: map[string]string{"tenant": "t1"},
		Priority: store.PriorityLow, RunAt: at, MaxAttempts: 4}}
	p := job("k")
	p.FollowUps = []store.FollowUp{f}
	_, err := s.Insert(ctx, []store.InsertParams{p})
	require.NoError(t, err)
	got, err := s.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Len(t, got.FollowUps, 1)
	require.Equal(t, string(f.Job.Payload), string(got.FollowUps[0].Job.Payload))
	require.Equal(t, f.On, got.FollowUps[0].On)
	require.Equal(t, f.Job.Metadata, got.FollowUps[0].Job.Metadata)
	require.True(t, f.Job.RunAt.Equal(got.FollowUps[0].Job.RunAt))

	j := claimKind(t, s, "k", 1)[0]
	ok, err := s.Finish(ctx, []store.FinishParams{{Lease: leaseOf(j), Outcome: store.OutcomeSucceeded}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	ups, err := s.FollowUps(ctx, p.ID)
	require.NoError(t, err)
	require.Len(t, ups, 1)
	u := ups[0]
	require.Equal(t, string(f.Job.Payload), string(u.Payload), "follow-up payload not byte for byte")
	require.Equal(t, f.Job.Metadata, u.Metadata)
	require.Equal(t, store.PriorityLow, u.Priority)
	require.Equal(t, 4, u.MaxAttempts)
	require.WithinDuration(t, at, u.RunAt, time.Microsecond)
	require.Equal(t, byte(7), u.ID[6]>>4, "follow-up IDs are UUIDv7")
	require.Equal(t, byte(2), u.ID[8]>>6, "RFC 9562 variant")
	require.WithinDuration(t, time.Now(), time.UnixMilli(int64(u.ID[0])<<40|int64(u.ID[1])<<32|int64(u.ID[2])<<24|
		int64(u.ID[3])<<16|int64(u.ID[4])<<8|int64(u.ID[5])), 5*time.Second)
}

// TestFollowUpsOnDuplicate: an insert whose unique key is held inserts
// nothing, and the holder keeps its own follow-ups.
func TestFollowUpsOnDuplicate(t *testing.T) {
	t.Parallel()
	s, _ := newStorePool(t)
	ctx := ctxT(t)
	holder := job("k")
	holder.UniqueKey = "u"
	_, err := s.Insert(ctx, []store.InsertParams{holder})
	require.NoError(t, err)
	dup := job("k")
	dup.UniqueKey = "u"
	dup.FollowUps = []store.FollowUp{{On: []store.State{store.StateDead}, Job: job("after")}}
	res, err := s.Insert(ctx, []store.InsertParams{dup, job("other")})
	require.NoError(t, err)
	require.True(t, res[0].Duplicate)
	got, err := s.Get(ctx, holder.ID)
	require.NoError(t, err)
	require.Empty(t, got.FollowUps)
}

// TestBatchesEndConcurrently: children of several batches, ended by many
// multi-row Finish calls at once, complete each batch exactly once, and
// leave nothing in batch_ends.
func TestBatchesEndConcurrently(t *testing.T) {
	t.Parallel()
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	const batches, children = 4, 150
	var ids []uuid.UUID
	var comps []uuid.UUID
	// Interleave the batches' insertions so their children's IDs interleave
	// too, and Finish calls mix batches in any order.
	params := make([]*store.BatchParams, batches)
	for b := range params {
		params[b] = &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Completion: job("done")}
		ids, comps = append(ids, params[b].ID), append(comps, params[b].Completion.ID)
	}
	for range children {
		for b := range params {
			params[b].Children = append(params[b].Children, job("child"))
		}
	}
	for _, p := range params {
		_, err := s.InsertBatch(ctx, p)
		require.NoError(t, err)
	}
	claimed := claimKind(t, s, "child", batches*children)
	require.Len(t, claimed, batches*children)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 8 {
		wg.Go(func() {
			var ps []store.FinishParams
			for i := w; i < len(claimed); i += 8 {
				ps = append(ps, store.FinishParams{Lease: leaseOf(claimed[i]), Outcome: store.OutcomeSucceeded,
					Result: json.RawMessage(`1`)})
			}
			for len(ps) > 0 { // several children of several batches per call
				n := min(len(ps), 7)
				if _, err := s.Finish(ctx, ps[:n]); err != nil {
					errs <- err
				}
				ps = ps[n:]
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i, id := range ids {
		b, err := s.Batch(ctx, id)
		require.NoError(t, err)
		require.True(t, b.Completed)
		require.Equal(t, []int{children, children, 0}, []int{b.Total, b.Succeeded, b.Pending})
		c, err := s.Get(ctx, comps[i])
		require.NoError(t, err)
		require.Equal(t, id, c.Batch)
		require.NotEqual(t, uuid.Nil, c.Parent, "the completion names the child whose end inserted it")
	}
	require.Len(t, claimKind(t, s, "done", 100), batches, "one completion job per batch")
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.batch_ends`).Scan(&left))
	require.Zero(t, left)
}

// TestBatchChildReopened: RunNow of a dead child counts it open again;
// its second end completes the batch; a retry after that reopens it.
func TestBatchChildReopened(t *testing.T) {
	t.Parallel()
	s, _ := newStorePool(t)
	ctx := ctxT(t)
	p := &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Completion: job("done")}
	p.Children = []store.InsertParams{job("child"), job("child")}
	_, err := s.InsertBatch(ctx, p)
	require.NoError(t, err)
	cs := claimKind(t, s, "child", 2)
	_, err = s.Finish(ctx, []store.FinishParams{{Lease: leaseOf(cs[0]), Outcome: store.OutcomeDead, Error: "x"}})
	require.NoError(t, err)
	b, err := s.Batch(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, []int{b.Dead, b.Pending})
	_, err = s.Control(ctx, cs[0].ID, store.OpRunNow)
	require.NoError(t, err)
	b, err = s.Batch(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, []int{0, 2}, []int{b.Dead, b.Pending})
	_, err = s.Finish(ctx, []store.FinishParams{{Lease: leaseOf(cs[1]), Outcome: store.OutcomeSucceeded}})
	require.NoError(t, err)
	again := claimKind(t, s, "child", 1)
	require.Len(t, again, 1)
	_, err = s.Finish(ctx, []store.FinishParams{{Lease: leaseOf(again[0]), Outcome: store.OutcomeDead, Error: "y"}})
	require.NoError(t, err)
	b, err = s.Batch(ctx, p.ID)
	require.NoError(t, err)
	require.True(t, b.Completed)
	require.Equal(t, []int{1, 1, 0}, []int{b.Succeeded, b.Dead, b.Pending})
	_, err = s.Control(ctx, again[0].ID, store.OpRunNow)
	require.NoError(t, err)
	b, err = s.Batch(ctx, p.ID)
	require.NoError(t, err)
	require.False(t, b.Completed, "the retried child reopened the batch (migration 0017)")
	require.True(t, b.CompletedAt.IsZero())
	require.Equal(t, 1, b.Pending)
	require.Len(t, claimKind(t, s, "done", 10), 1, "the first completion job only, until the batch completes again")
}

// TestInsertBatchTxScope: the batch setting does not leak into the
// caller's later inserts in the same transaction, and the batch exists
// only if the transaction commits.
func TestInsertBatchTxScope(t *testing.T) {
	t.Parallel()
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	p := &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Completion: job("done"),
		Children: []store.InsertParams{job("child"), job("child"), job("child")}}
	after := job("plain")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := s.InsertBatchTx(ctx, tx, p); err != nil {
			return err
		}
		_, err := s.InsertTx(ctx, tx, []store.InsertParams{after})
		return err
	})
	require.NoError(t, err)
	got, err := s.Get(ctx, after.ID)
	require.NoError(t, err)
	require.Equal(t, uuid.Nil, got.Batch, "a later insert in the transaction joined the batch")
	kids, err := s.BatchChildren(ctx, p.ID, uuid.Nil, 10)
	require.NoError(t, err)
	require.Len(t, kids, 3)
}

// TestFollowUpsInOtherSchema: the triggers and functions of a schema
// named by WithSchema work on that schema's tables, whatever the session's
// search_path, and notify that schema's listeners.
func TestFollowUpsInOtherSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := ctxT(t)
	s, err := pgstore.New(ctx, pool, pgstore.WithSchema("tenant_b"))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	rec := newRecorder()
	unsubscribe := s.Subscribe(rec.record)
	defer unsubscribe()

	p := &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Completion: job("done"), Children: []store.InsertParams{job("child")}}
	p.Children[0].FollowUps = []store.FollowUp{{On: []store.State{store.StateSucceeded}, Job: job("after")}}
	_, err = s.InsertBatch(ctx, p)
	require.NoError(t, err)
	j := claimKind(t, s, "child", 1)[0]
	_, err = s.Finish(ctx, []store.FinishParams{{Lease: leaseOf(j), Outcome: store.OutcomeSucceeded}})
	require.NoError(t, err)
	ups, err := s.FollowUps(ctx, j.ID)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"after", "done"}, []string{ups[0].Kind, ups[1].Kind})
	_, ok := rec.waitKind(t, "done", 10*time.Second)
	require.True(t, ok, "no notification of the completion job on the schema's channel")
	var inDefault int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs`).Scan(&inDefault))
	require.Zero(t, inDefault, "jobs landed in the default schema")
}
