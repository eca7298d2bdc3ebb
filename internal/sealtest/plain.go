package sealtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Turning encryption on for a deployment that has jobs: the jobs stored
// plain before the keys run as they are on hosts with the ring, and
// ReencryptOptions.SealPlain seals them.

// retryInAnHour makes a failed attempt's job wait, retrying, for an hour.
func retryInAnHour(c *ax.Config) {
	c.RetryPolicy = ax.RetryPolicyFunc(func(int, error) time.Duration { return time.Hour })
}

// failFirst is g's handler, failing every job's first attempt.
func (g *got) failFirst() func(ctx context.Context, j *ax.Job, p payload) (payload, error) {
	h := g.handler()
	return func(ctx context.Context, j *ax.Job, p payload) (payload, error) {
		if j.Attempt == 1 {
			return p, errors.New("try again later")
		}
		return h(ctx, j, p)
	}
}

// waitState polls until job id is in state.
func waitState(t *testing.T, st store.Store, id uuid.UUID, state store.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := st.Get(t.Context(), id)
		require.NoError(t, err)
		if rec.State == state {
			return
		}
		require.False(t, rec.State.Final(), "job %s is %s, want %s: %+v", id, rec.State, state, rec.Errors)
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s, want %s", id, rec.State, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requirePlain requires that v is stored plain.
func requirePlain(t *testing.T, v []byte) {
	t.Helper()
	require.False(t, ax.IsSealed(v), "sealed: %s", v)
	require.Contains(t, string(v), secret)
}

// plainMD is the metadata of the plain jobs: "tok" is named secret to
// SealPlain, "tenant" is not.
var plainMD = map[string]string{"tok": "tok-" + secret, "tenant": "acme"}

// testPlainBeforeKeys: jobs stored plain, by a host without the ring,
// before encryption was turned on, run with their plain payloads on a
// host with the ring — scheduled, retrying, with a follow-up template —
// and a plain result reads back as it is.
func testPlainBeforeKeys(t *testing.T, st store.Store) {
	ctx := t.Context()
	plain := newScheduler(t, st, nil, retryInAnHour)
	g0 := newGot()
	require.NoError(t, ax.HandleResult(plain, "pk.done", g0.handler()))
	require.NoError(t, ax.HandleResult(plain, "pk.retry", g0.failFirst()))
	sched := schedule(t, plain, "pk.sched", 3, ax.Metadata(plainMD),
		ax.FollowUp([]ax.State{ax.StateSucceeded}, "pk.after", payload{Email: secret, N: 100}, ax.Metadata(plainMD)))
	retry := schedule(t, plain, "pk.retry", 1)
	done := schedule(t, plain, "pk.done", 1)
	require.NoError(t, plain.Start(ctx))
	waitState(t, st, retry[0], store.StateRetrying)
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, done[0]).State)
	require.NoError(t, plain.Stop(ctx))
	for _, id := range append(sched, retry[0], done[0]) {
		rec, err := st.Get(ctx, id)
		require.NoError(t, err)
		requirePlain(t, rec.Payload)
	}

	// Hosts with the ring take over (the rolling switch's other half).
	keyed := newScheduler(t, st, Ring(t, k1))
	g := newGot()
	for _, kind := range []string{"pk.sched", "pk.after", "pk.retry"} {
		require.NoError(t, ax.HandleResult(keyed, kind, g.handler()))
	}
	_, err := keyed.RunNow(ctx, retry[0])
	require.NoError(t, err)
	require.NoError(t, keyed.Start(ctx))
	for i, id := range sched {
		rec := waitFinal(t, st, id)
		require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
		requireSealed(t, rec.Result, "k1")
		p, md := g.get(id)
		require.Equal(t, payload{Email: secret, N: i}, p)
		require.Equal(t, plainMD, md)
		after, err := keyed.Admin().FollowUps(ctx, id)
		require.NoError(t, err)
		require.Len(t, after, 1)
		require.Equal(t, store.StateSucceeded, waitFinal(t, st, after[0].ID).State, "%+v", after[0].Errors)
		p, md = g.get(after[0].ID)
		require.Equal(t, payload{Email: secret, N: 100}, p, "the follow-up of a plain template")
		require.Equal(t, plainMD, md)
	}
	rec := waitFinal(t, st, retry[0])
	require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
	p, _ := g.get(retry[0])
	require.Equal(t, payload{Email: secret}, p)

	// A plain result reads back as it is, with the ring or without.
	withKeys, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: Ring(t, k1), Logger: zap.NewNop()})
	require.NoError(t, err)
	r, err := withKeys.Get(ctx, done[0])
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"email":"result for %s","n":0}`, secret), string(r.Result))
	r, err = keyed.Get(ctx, done[0])
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"email":%q,"n":0}`, secret), string(r.Payload))
}

// hookableStore is what testSealPlain needs of a store.
type hookableStore interface {
	store.Store
	store.JobInspector
	store.Resealer
	store.FlowStore
}

// hookedResealer calls before ahead of the store's first Reseal, as if a
// job changed between the pass's read and its write.
type hookedResealer struct {
	hookableStore
	once   sync.Once
	before func()
}

func (h *hookedResealer) Reseal(ctx context.Context, rows []store.ResealParams) ([]bool, error) {
	h.once.Do(h.before)
	return h.hookableStore.Reseal(ctx, rows)
}

// blocker holds handlers until their job is released.
type blocker struct {
	mu      sync.Mutex
	release map[uuid.UUID]chan struct{}
	seen    map[uuid.UUID]payload
	entered chan uuid.UUID
	done    chan struct{} // closed when the test ends: every handler returns
}

// newBlocker returns a blocker whose handlers all return when t ends.
func newBlocker(t *testing.T) *blocker {
	b := &blocker{release: map[uuid.UUID]chan struct{}{}, seen: map[uuid.UUID]payload{},
		entered: make(chan uuid.UUID, 16), done: make(chan struct{})}
	t.Cleanup(func() { close(b.done) })
	return b
}

func (b *blocker) ch(id uuid.UUID) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.release[id] == nil {
		b.release[id] = make(chan struct{})
	}
	return b.release[id]
}

func (b *blocker) handler(ctx context.Context, j *ax.Job, p payload) (payload, error) {
	b.mu.Lock()
	b.seen[j.ID] = p
	b.mu.Unlock()
	b.entered <- j.ID
	select {
	case <-b.ch(j.ID):
	case <-b.done:
		return p, errors.New("test over")
	case <-ctx.Done():
		return p, ctx.Err()
	}
	return payload{Email: "result for " + p.Email, N: p.N}, nil
}

func testSealPlain(t *testing.T, st store.Store) {
	fs, ok := st.(hookableStore)
	if !ok {
		t.Skipf("%T has no store.Resealer, store.JobInspector or store.FlowStore", st)
	}
	ctx := t.Context()
	// Before the keys: plain jobs in every state.
	plain := newScheduler(t, st, nil, retryInAnHour)
	g0 := newGot()
	require.NoError(t, ax.HandleResult(plain, "sp.done", g0.handler()))
	require.NoError(t, ax.Handle(plain, "sp.noresult", func(context.Context, *ax.Job, payload) error { return nil }))
	require.NoError(t, ax.HandleResult(plain, "sp.retry", g0.failFirst()))
	sched := schedule(t, plain, "sp.sched", 2, ax.Metadata(plainMD),
		ax.FollowUp([]ax.State{ax.StateSucceeded}, "sp.after", payload{Email: secret, N: 100}, ax.Metadata(plainMD)))
	retry := schedule(t, plain, "sp.retry", 1, ax.Metadata(plainMD))
	done := schedule(t, plain, "sp.done", 1)
	noResult := schedule(t, plain, "sp.noresult", 1)
	run := schedule(t, plain, "sp.run", 2)
	// A kind a host without the ring partitions by a payload field: its
	// jobs stay plain.
	require.NoError(t, fs.SetFlows(ctx, &store.SetFlowsParams{Node: "old-host", Flows: []store.FlowConfig{
		{Kind: "sp.part", Partition: store.PartitionSource{PayloadField: "email"}, PartitionConcurrency: 1}}}))
	part := schedule(t, plain, "sp.part", 1)
	require.NoError(t, plain.Start(ctx))
	waitState(t, st, retry[0], store.StateRetrying)
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, done[0]).State)
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, noResult[0]).State)
	require.NoError(t, plain.Stop(ctx))
	if ar, ok := st.(store.Archiver); ok {
		n, err := ar.Archive(ctx, 100) // into the history, where the store has one
		require.NoError(t, err)
		t.Logf("%d finished job(s) archived", n)
	}
	rec, err := st.Get(ctx, done[0])
	require.NoError(t, err)
	requirePlain(t, rec.Result)

	// A host with the ring runs the sp.run jobs, still plain, and holds
	// them running while the pass runs.
	runner := newScheduler(t, st, Ring(t, k1))
	b := newBlocker(t) // after runner: its cleanup, first, frees the handlers
	require.NoError(t, ax.HandleResult(runner, "sp.run", b.handler))
	require.NoError(t, runner.Start(ctx))
	for range run {
		select {
		case <-b.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the sp.run jobs did not start")
		}
	}

	// The pass. Between its read and its write run[0] ends, writing its
	// result: it is left as it is, counted in Changed.
	ring := Ring(t, k1)
	hooked := &hookedResealer{hookableStore: fs, before: func() {
		close(b.ch(run[0]))
		rec := waitFinal(t, st, run[0])
		require.Equal(t, store.StateSucceeded, rec.State)
	}}
	a, err := ax.NewAdmin(ax.AdminConfig{Store: hooked, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	// Without SealPlain, plain values stay plain (what Reencrypt did
	// before SealPlain).
	none, err := a.Reencrypt(ctx, ax.ReencryptOptions{})
	require.NoError(t, err)
	require.Zero(t, none.Resealed)
	rec, err = st.Get(ctx, sched[0])
	require.NoError(t, err)
	requirePlain(t, rec.Payload)

	all := int64(len(sched) + len(retry) + len(done) + len(noResult) + len(run) + len(part))
	prog, err := a.Reencrypt(ctx, ax.ReencryptOptions{SealPlain: true, SecretMetadata: []string{"tok"}})
	require.NoError(t, err)
	require.Equal(t, ax.ReencryptProgress{Scanned: all, Resealed: all - 1 - int64(len(part)), Sealed: all - 1 - int64(len(part)),
		Changed: 1, LeftPlain: int64(len(part)), Last: prog.Last}, prog)

	// As stored: sealed with k1, the named metadata too, the rest plain.
	for _, id := range append(append(append([]uuid.UUID{}, sched...), retry...), done[0], noResult[0], run[1]) {
		rec, err := st.Get(ctx, id)
		require.NoError(t, err)
		requireSealed(t, rec.Payload, "k1")
		if _, ok := rec.Metadata["tok"]; ok {
			requireSealed(t, []byte(rec.Metadata["tok"]), "k1")
			require.Equal(t, "acme", rec.Metadata["tenant"])
		}
		if rec.Result != nil {
			requireSealed(t, rec.Result, "k1")
		}
	}
	for _, id := range sched {
		rec, err := st.Get(ctx, id)
		require.NoError(t, err)
		require.Len(t, rec.FollowUps, 1)
		requireSealed(t, rec.FollowUps[0].Job.Payload, "k1")
		requireSealed(t, []byte(rec.FollowUps[0].Job.Metadata["tok"]), "k1")
		require.Equal(t, "acme", rec.FollowUps[0].Job.Metadata["tenant"])
	}
	rec, err = st.Get(ctx, run[0])
	require.NoError(t, err)
	requirePlain(t, rec.Payload) // changed meanwhile: left for the next pass
	requireSealed(t, rec.Result, "k1")
	for _, id := range part {
		rec, err := st.Get(ctx, id)
		require.NoError(t, err)
		requirePlain(t, rec.Payload)
	}

	// The next pass takes the job that changed; the one after finds
	// nothing to do.
	next, err := a.Reencrypt(ctx, ax.ReencryptOptions{SealPlain: true, SecretMetadata: []string{"tok"}})
	require.NoError(t, err)
	require.Equal(t, ax.ReencryptProgress{Scanned: all, Resealed: 1, Sealed: 1, LeftPlain: int64(len(part)), Last: prog.Last}, next)
	again, err := a.Reencrypt(ctx, ax.ReencryptOptions{SealPlain: true, SecretMetadata: []string{"tok"}})
	require.NoError(t, err)
	require.Equal(t, ax.ReencryptProgress{Scanned: all, LeftPlain: int64(len(part)), Last: prog.Last}, again)
	usage, _, err := a.KeyUsage(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k1": all - int64(len(part))}, usage)

	// The running job sealed under its attempt ends, its result sealed.
	close(b.ch(run[1]))
	rec = waitFinal(t, st, run[1])
	require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
	requireSealed(t, rec.Payload, "k1")
	requireSealed(t, rec.Result, "k1")
	b.mu.Lock()
	require.Equal(t, payload{Email: secret, N: 1}, b.seen[run[1]], "the attempt had the plain payload")
	b.mu.Unlock()

	// Everything opens on a host with the ring: handlers see the plain
	// payloads and metadata, follow-ups of the sealed templates too.
	g := newGot()
	w := newScheduler(t, st, ring)
	for _, kind := range []string{"sp.sched", "sp.after", "sp.retry"} {
		require.NoError(t, ax.HandleResult(w, kind, g.handler()))
	}
	_, err = w.RunNow(ctx, retry[0])
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	for i, id := range sched {
		rec := waitFinal(t, st, id)
		require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
		p, md := g.get(id)
		require.Equal(t, payload{Email: secret, N: i}, p)
		require.Equal(t, plainMD, md)
		after, err := w.Admin().FollowUps(ctx, id)
		require.NoError(t, err)
		require.Len(t, after, 1)
		rec = waitFinal(t, st, after[0].ID)
		require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
		p, md = g.get(after[0].ID)
		require.Equal(t, payload{Email: secret, N: 100}, p)
		require.Equal(t, plainMD, md)
	}
	rec = waitFinal(t, st, retry[0])
	require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
	p, md := g.get(retry[0])
	require.Equal(t, payload{Email: secret}, p)
	require.Equal(t, plainMD, md)
	withKeys, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	for _, id := range []uuid.UUID{done[0], run[0], run[1]} {
		r, err := withKeys.Get(ctx, id)
		require.NoError(t, err)
		require.Contains(t, string(r.Payload), secret)
		require.JSONEq(t, fmt.Sprintf(`{"email":"result for %s","n":%d}`, secret, map[uuid.UUID]int{done[0]: 0, run[0]: 0, run[1]: 1}[id]),
			string(r.Result))
	}
	r, err := withKeys.Get(ctx, noResult[0])
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"email":%q,"n":0}`, secret), string(r.Payload))
}

// testSealPlainRefusals: SecretMetadata needs SealPlain, and a key a kind
// partitions by is refused.
func testSealPlainRefusals(t *testing.T, st store.Store) {
	if _, ok := st.(store.Resealer); !ok {
		t.Skipf("%T has no store.Resealer", st)
	}
	a, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: Ring(t, k1), Logger: zap.NewNop()})
	require.NoError(t, err)
	_, err = a.Reencrypt(t.Context(), ax.ReencryptOptions{SecretMetadata: []string{"tok"}})
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	_, err = a.Reencrypt(t.Context(), ax.ReencryptOptions{SealPlain: true, SecretMetadata: []string{""}})
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	if fs, ok := st.(store.FlowStore); ok {
		require.NoError(t, fs.SetFlows(t.Context(), &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{
			{Kind: "sp.md", Partition: store.PartitionSource{Metadata: "tenant"}, PartitionConcurrency: 1}}}))
		_, err = a.Reencrypt(t.Context(), ax.ReencryptOptions{SealPlain: true, SecretMetadata: []string{"tok", "tenant"}})
		require.ErrorIs(t, err, ax.ErrInvalidOption)
		require.Contains(t, err.Error(), `kind "sp.md" partitions by it`)
	}
}

// testSealPlainResumes: a SealPlain pass killed between two batches and
// resumed with After seals every plain job once, beside jobs already
// sealed; every job opens at every moment.
func testSealPlainResumes(t *testing.T, st store.Store) {
	if _, ok := st.(store.Resealer); !ok {
		t.Skipf("%T has no store.Resealer", st)
	}
	if _, ok := st.(store.JobInspector); !ok {
		t.Skipf("%T has no store.JobInspector", st)
	}
	ctx := t.Context()
	plain := newScheduler(t, st, nil)
	ids := schedule(t, plain, "sp.re", 30, ax.Metadata(plainMD))
	g := newGot()
	require.NoError(t, ax.HandleResult(plain, "sp.re.done", g.handler()))
	done := schedule(t, plain, "sp.re.done", 5)
	require.NoError(t, plain.Start(ctx))
	for _, id := range done {
		require.Equal(t, store.StateSucceeded, waitFinal(t, st, id).State)
	}
	require.NoError(t, plain.Stop(ctx))
	ring := Ring(t, k1)
	// Jobs scheduled once the keys are on are sealed already.
	ids = append(ids, done...)
	ids = append(ids, schedule(t, newScheduler(t, st, ring), "sp.re", 5, ax.SecretMetadata(map[string]string{"tok": plainMD["tok"]}),
		ax.Metadata(map[string]string{"tenant": "acme"}))...)

	killed := &failingResealer{Store: st, n: 2}
	a, err := ax.NewAdmin(ax.AdminConfig{Store: killed, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	opts := ax.ReencryptOptions{BatchSize: 8, SealPlain: true, SecretMetadata: []string{"tok"}}
	prog, err := a.Reencrypt(ctx, opts)
	require.ErrorIs(t, err, errKilled)
	require.Equal(t, int64(16), prog.Scanned, "two batches went through before the kill")
	require.Equal(t, int64(16), prog.Sealed)
	require.Equal(t, int64(16), prog.Resealed)

	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	usage, _, err := admin.KeyUsage(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k1": 16 + 5}, usage)
	requireAllOpen(t, admin, ids)

	opts.After = prog.Last
	rest, err := admin.Reencrypt(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, ax.ReencryptProgress{Scanned: 40 - 16, Resealed: 35 - 16, Sealed: 35 - 16, Last: rest.Last}, rest)
	opts.After = uuid.Nil
	again, err := admin.Reencrypt(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, ax.ReencryptProgress{Scanned: 40, Last: rest.Last}, again)
	usage, _, err = admin.KeyUsage(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k1": 40}, usage)
	requireAllOpen(t, admin, ids)

	worker := newScheduler(t, st, ring)
	require.NoError(t, ax.HandleResult(worker, "sp.re", g.handler()))
	require.NoError(t, worker.Start(ctx))
	for i, id := range ids[:30] {
		require.Equal(t, store.StateSucceeded, waitFinal(t, st, id).State)
		p, md := g.get(id)
		require.Equal(t, payload{Email: secret, N: i}, p)
		require.Equal(t, plainMD, md)
	}
}

// requireAllOpen requires that a opens the payload, metadata and result
// of each job.
func requireAllOpen(t *testing.T, a *ax.Admin, ids []uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		r, err := a.Get(t.Context(), id)
		require.NoError(t, err)
		require.False(t, ax.IsSealed(r.Payload), "job %s does not open", id)
		require.Contains(t, string(r.Payload), secret)
		if r.Result != nil {
			require.False(t, ax.IsSealed(r.Result), "job %s: result does not open", id)
		}
		if tok, ok := r.Metadata["tok"]; ok {
			require.Equal(t, plainMD["tok"], tok)
		}
	}
}
