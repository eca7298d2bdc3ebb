// Package sealtest checks encryption at rest (ax.Config.Keys) end to end
// on a store: the same cases run on memstore (the root package's tests),
// pgstore and sqlitestore (their packages' tests).
package sealtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// NewStoreFunc returns a fresh, empty store for one case, closed by its
// own cleanup.
type NewStoreFunc = func(t *testing.T) store.Store

// Run runs every case on stores made by newStore.
func Run(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name string
		run  func(t *testing.T, st store.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Tamper", testTamper},
		{"MissingKey", testMissingKey},
		{"DecodeErrors", testDecodeErrors},
		{"RotationThreeKeys", testRotation},
		{"ReencryptResumes", testReencryptResumes},
		{"Refusals", testRefusals},
		{"NoPlainTextInLogs", testLogs},
		{"PlainBeforeKeys", testPlainBeforeKeys},
		{"SealPlain", testSealPlain},
		{"SealPlainRefusals", testSealPlainRefusals},
		{"SealPlainResumes", testSealPlainResumes},
		{"BatchCompletion", testBatchCompletion},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

// Keys k1, k2, k3, fixed for the run.
var k1, k2, k3 = mustKey("k1"), mustKey("k2"), mustKey("k3")

func mustKey(id string) ax.Key {
	k, err := ax.GenerateKey(id)
	if err != nil {
		panic(err)
	}
	return k
}

// Ring returns a key ring of current and older, failing t on error.
func Ring(t *testing.T, current ax.Key, older ...ax.Key) *ax.KeyRing {
	t.Helper()
	r, err := ax.NewKeyRing(current, older...)
	require.NoError(t, err)
	return r
}

// secret is the text every payload carries: it must never be seen in the
// store, in logs or by a tool without the keys.
const secret = "ada@example.com"

type payload struct {
	Email string `json:"email"`
	N     int    `json:"n"`
}

// newScheduler returns a Scheduler on st with keys, stopped at the end.
func newScheduler(t *testing.T, st store.Store, keys *ax.KeyRing, edit ...func(*ax.Config)) *ax.Scheduler {
	t.Helper()
	cfg := ax.Config{Store: st, Keys: keys, Logger: zap.NewNop(), PollInterval: 20 * time.Millisecond}
	for _, e := range edit {
		e(&cfg)
	}
	s, err := ax.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// waitFinal polls until job id is final and returns it as stored.
func waitFinal(t *testing.T, st store.Store, id uuid.UUID) *store.JobRecord {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := st.Get(t.Context(), id)
		require.NoError(t, err)
		if rec.State.Final() {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s", id, rec.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// schedule schedules n jobs of kind with s, not started, and returns
// their IDs.
func schedule(t *testing.T, s *ax.Scheduler, kind string, n int, opts ...ax.ScheduleOption) []uuid.UUID {
	t.Helper()
	reqs := make([]ax.Request, n)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: kind, Payload: payload{Email: secret, N: i}, Options: opts}
	}
	res, err := s.ScheduleMany(t.Context(), reqs)
	require.NoError(t, err)
	ids := make([]uuid.UUID, n)
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// requireSealed requires that v is sealed with key and does not hold the
// secret.
func requireSealed(t *testing.T, v []byte, key string) {
	t.Helper()
	require.True(t, ax.IsSealed(v), "not sealed: %s", v)
	require.Equal(t, key, ax.SealedKeyID(v))
	require.NotContains(t, string(v), secret)
	require.NotContains(t, string(v), "n\":")
}

// got records what handlers saw.
type got struct {
	mu   sync.Mutex
	jobs map[uuid.UUID]payload
	md   map[uuid.UUID]map[string]string
}

func newGot() *got {
	return &got{jobs: map[uuid.UUID]payload{}, md: map[uuid.UUID]map[string]string{}}
}

func (g *got) handler() func(ctx context.Context, j *ax.Job, p payload) (payload, error) {
	return func(ctx context.Context, j *ax.Job, p payload) (payload, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.jobs[j.ID] = p
		g.md[j.ID] = j.Metadata
		return payload{Email: "result for " + p.Email, N: p.N}, nil
	}
}

func (g *got) get(id uuid.UUID) (payload, map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.jobs[id], g.md[id]
}

func testRoundTrip(t *testing.T, st store.Store) {
	keys := Ring(t, k1)
	s := newScheduler(t, st, keys)
	g := newGot()
	require.NoError(t, ax.HandleResult(s, "seal.rt", g.handler()))
	require.NoError(t, ax.HandleResult(s, "seal.after", g.handler()))
	require.NoError(t, ax.HandleResult(s, "seal.then", func(ctx context.Context, j *ax.Job, p payload) (payload, error) {
		if p.N == 0 {
			if err := ax.Then(ctx, "seal.rt", payload{Email: secret, N: 7}); err != nil {
				return p, err
			}
		}
		return p, nil
	}))
	ctx := t.Context()
	res, err := s.Schedule(ctx, "seal.rt", payload{Email: secret, N: 1},
		ax.SecretMetadata(map[string]string{"token": "s3cr3t-token"}), ax.Metadata(map[string]string{"tenant": "acme"}),
		ax.FollowUp([]ax.State{ax.StateSucceeded}, "seal.after", payload{Email: secret, N: 2}))
	require.NoError(t, err)
	id := res.ID
	resThen, err := s.Schedule(ctx, "seal.then", payload{Email: secret})
	require.NoError(t, err)

	raw, err := st.Get(ctx, id)
	require.NoError(t, err)
	requireSealed(t, raw.Payload, "k1")
	requireSealed(t, []byte(raw.Metadata["token"]), "k1")
	require.Equal(t, "acme", raw.Metadata["tenant"], "plain metadata stays plain")
	require.Len(t, raw.FollowUps, 1)
	requireSealed(t, raw.FollowUps[0].Job.Payload, "k1")

	require.NoError(t, s.Start(ctx))
	rec := waitFinal(t, st, id)
	require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
	requireSealed(t, rec.Result, "k1")
	p, md := g.get(id)
	require.Equal(t, payload{Email: secret, N: 1}, p)
	// A job scheduled while the host runs (started directly where the
	// store can) opens too.
	direct, err := s.Schedule(ctx, "seal.rt", payload{Email: secret, N: 9})
	require.NoError(t, err)
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, direct.ID).State)
	dp, _ := g.get(direct.ID)
	require.Equal(t, payload{Email: secret, N: 9}, dp)
	require.Equal(t, "s3cr3t-token", md["token"])
	require.Equal(t, "acme", md["tenant"])

	// The follow-up (ID chosen by the store) and the Then job open too.
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, resThen.ID).State)
	after, err := s.Admin().FollowUps(ctx, id)
	require.NoError(t, err)
	require.Len(t, after, 1)
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, after[0].ID).State, "%+v", after[0].Errors)
	fp, _ := g.get(after[0].ID)
	require.Equal(t, payload{Email: secret, N: 2}, fp)
	thens, err := s.Admin().FollowUps(ctx, resThen.ID)
	require.NoError(t, err)
	require.Len(t, thens, 1)
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, thens[0].ID).State, "%+v", thens[0].Errors)

	// Readers with the ring see plain values; without it, sealed ones.
	withKeys, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: keys, Logger: zap.NewNop()})
	require.NoError(t, err)
	r, err := withKeys.Get(ctx, id)
	require.NoError(t, err)
	require.JSONEq(t, `{"email":"ada@example.com","n":1}`, string(r.Payload))
	require.JSONEq(t, `{"email":"result for ada@example.com","n":1}`, string(r.Result))
	require.Equal(t, "s3cr3t-token", r.Metadata["token"])
	r, err = s.Get(ctx, id)
	require.NoError(t, err)
	require.JSONEq(t, `{"email":"result for ada@example.com","n":1}`, string(r.Result))
	noKeys, err := ax.NewAdmin(ax.AdminConfig{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	list, err := noKeys.List(ctx, ax.ListOptions{Filter: ax.JobFilter{IDs: []uuid.UUID{id}}})
	require.NoError(t, err)
	require.Len(t, list.Jobs, 1)
	requireSealed(t, list.Jobs[0].Payload, "k1")
	requireSealed(t, list.Jobs[0].Result, "k1")
}

// tamperStore changes stored values as someone with write access to the
// database could, through store.Resealer.
func tamper(t *testing.T, st store.Store, id uuid.UUID, change func(rec *store.JobRecord) json.RawMessage) {
	t.Helper()
	rs, ok := st.(store.Resealer)
	if !ok {
		t.Skipf("%T cannot rewrite payloads", st)
	}
	rec, err := st.Get(t.Context(), id)
	require.NoError(t, err)
	applied, err := rs.Reseal(t.Context(), []store.ResealParams{{ID: id, OldPayload: rec.Payload, Payload: change(rec)}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, applied)
}

func testTamper(t *testing.T, st store.Store) {
	s := newScheduler(t, st, Ring(t, k1, k2))
	g := newGot()
	require.NoError(t, ax.HandleResult(s, "seal.t", g.handler()))
	ids := schedule(t, s, "seal.t", 4)
	ctx := t.Context()
	stored := func(id uuid.UUID) json.RawMessage {
		rec, err := st.Get(ctx, id)
		require.NoError(t, err)
		return rec.Payload
	}
	cases := []struct {
		name   string
		id     uuid.UUID
		change func(rec *store.JobRecord) json.RawMessage
	}{
		{"FlippedByte", ids[0], func(rec *store.JobRecord) json.RawMessage {
			var env map[string]any
			require.NoError(t, json.Unmarshal(rec.Payload, &env))
			box := []byte(env["box"].(string))
			if box[20] == 'A' {
				box[20] = 'B'
			} else {
				box[20] = 'A'
			}
			env["box"] = string(box)
			b, err := json.Marshal(env)
			require.NoError(t, err)
			return b
		}},
		{"MovedFromAnotherJob", ids[1], func(*store.JobRecord) json.RawMessage { return stored(ids[2]) }},
		{"KeyIDChanged", ids[3], func(rec *store.JobRecord) json.RawMessage {
			return bytes.Replace(rec.Payload, []byte(`"key":"k1"`), []byte(`"key":"k2"`), 1)
		}},
	}
	for _, c := range cases {
		tamper(t, st, c.id, c.change)
	}
	require.NoError(t, s.Start(ctx))
	for _, c := range cases {
		rec := waitFinal(t, st, c.id)
		require.Equal(t, store.StateDead, rec.State, c.name)
		require.Len(t, rec.Errors, 1, c.name)
		require.Contains(t, rec.Errors[0].Error, "does not authenticate", c.name)
		require.NotContains(t, rec.Errors[0].Error, secret, c.name)
		p, _ := g.get(c.id)
		require.Zero(t, p, "%s: the handler ran", c.name)
	}
	// The job whose payload was copied still runs.
	require.Equal(t, store.StateSucceeded, waitFinal(t, st, ids[2]).State)
	// A tampered value with a key of the ring but another's ID fails too.
	require.Contains(t, waitFinal(t, st, ids[3]).Errors[0].Error, `key "k2"`)
}

// testMissingKey: a job whose key a host lacks is not a tampered job.
// The host leaves it for a host that has the key (a snooze, the attempt
// not counted, logged at warn and sent as EventKeyMissing), however
// often it claims it, and a host with the key then runs it. It used to
// fail permanently at its first attempt: a rolling deploy of a new key
// killed every job the hosts still without it claimed.
func testMissingKey(t *testing.T, st store.Store) {
	ctx := t.Context()
	old := newScheduler(t, st, Ring(t, k1))
	waiting := schedule(t, old, "seal.m", 2)
	core, logs := observer.New(zap.WarnLevel)
	events := &eventLog{}
	s := newScheduler(t, st, Ring(t, k2), func(c *ax.Config) {
		c.KeyMissingDelay = 10 * time.Millisecond
		c.Logger = zap.New(core)
		c.Observers = []ax.Observer{events}
	})
	g := newGot()
	require.NoError(t, ax.HandleResult(s, "seal.m", g.handler(), ax.MaxAttempts(2)))
	fine := schedule(t, s, "seal.m", 3)
	require.NoError(t, s.Start(ctx))
	for _, id := range fine {
		require.Equal(t, store.StateSucceeded, waitFinal(t, st, id).State)
	}
	// Each waiting job is claimed, and left, more times than it has
	// attempts: none of them counts.
	events.waitFor(t, func(seen []ax.Event) bool {
		n := map[uuid.UUID]int{}
		for _, e := range seen {
			if e.Kind == ax.EventKeyMissing {
				n[e.JobID]++
			}
		}
		return n[waiting[0]] >= 3 && n[waiting[1]] >= 3
	})
	require.NoError(t, s.Stop(ctx))
	for _, id := range waiting {
		rec, err := st.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateScheduled, rec.State, "a missing key is not the job's fault")
		require.Zero(t, rec.Attempt, "a job left for another host used no attempt")
		require.Empty(t, rec.Errors)
		p, _ := g.get(id)
		require.Zero(t, p, "the handler ran without the key")
	}
	events.mu.Lock()
	for _, e := range events.seen {
		if e.Kind == ax.EventKeyMissing {
			require.ErrorIs(t, e.Err, ax.ErrKeyMissing)
			var se *ax.SealError
			require.ErrorAs(t, e.Err, &se)
			require.Equal(t, "k1", se.KeyID)
		}
	}
	events.mu.Unlock()
	warned := logs.FilterMessageSnippet("left for a host that can open it").All()
	require.NotEmpty(t, warned)
	require.Contains(t, fmt.Sprint(warned[0].ContextMap()), `key "k1"`)

	// A host with the key runs them.
	s2 := newScheduler(t, st, Ring(t, k2, k1))
	require.NoError(t, ax.HandleResult(s2, "seal.m", g.handler()))
	require.NoError(t, s2.Start(ctx))
	for _, id := range waiting {
		require.Equal(t, store.StateSucceeded, waitFinal(t, st, id).State)
		p, _ := g.get(id)
		require.Equal(t, secret, p.Email)
	}

	// A host without a ring does not run sealed jobs as if plain, and
	// leaves them too.
	bareEvents := &eventLog{}
	bare := newScheduler(t, st, nil, func(c *ax.Config) {
		c.KeyMissingDelay = 10 * time.Millisecond
		c.Observers = []ax.Observer{bareEvents}
	})
	var ran atomic.Bool
	require.NoError(t, ax.Handle(bare, "seal.bare", func(context.Context, *ax.Job, payload) error { ran.Store(true); return nil }))
	ids := schedule(t, newScheduler(t, st, Ring(t, k2)), "seal.bare", 1)
	require.NoError(t, bare.Start(ctx))
	bareEvents.waitFor(t, func(seen []ax.Event) bool {
		n := 0
		for _, e := range seen {
			if e.Kind == ax.EventKeyMissing && e.JobID == ids[0] {
				n++
			}
		}
		return n >= 2
	})
	require.NoError(t, bare.Stop(ctx))
	rec, err := st.Get(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, rec.State)
	require.False(t, ran.Load())
}

func testRotation(t *testing.T, st store.Store) {
	ctx := t.Context()
	var ids []uuid.UUID
	var rings []*ax.KeyRing
	for _, r := range []*ax.KeyRing{Ring(t, k1), Ring(t, k2, k1), Ring(t, k3, k2, k1)} {
		p := newScheduler(t, st, r)
		got := schedule(t, p, "seal.rot", 5)
		rec, err := st.Get(ctx, got[0])
		require.NoError(t, err)
		requireSealed(t, rec.Payload, r.Current())
		ids = append(ids, got...)
		rings = append(rings, r)
	}
	// Two workers with the newest ring run all three generations.
	g := newGot()
	for range 2 {
		w := newScheduler(t, st, rings[2])
		require.NoError(t, ax.HandleResult(w, "seal.rot", g.handler()))
		require.NoError(t, w.Start(ctx))
	}
	for i, id := range ids {
		rec := waitFinal(t, st, id)
		require.Equal(t, store.StateSucceeded, rec.State, "%+v", rec.Errors)
		requireSealed(t, rec.Result, "k3")
		p, _ := g.get(id)
		require.Equal(t, payload{Email: secret, N: i % 5}, p)
	}
}

// failingResealer stops the store's re-seals after n calls, as a killed
// process would between two batches.
type failingResealer struct {
	store.Store
	mu sync.Mutex
	n  int
}

var errKilled = errors.New("killed")

func (f *failingResealer) ListJobs(ctx context.Context, p *store.ListJobsParams) (*store.JobPage, error) {
	return f.Store.(store.JobInspector).ListJobs(ctx, p)
}

func (f *failingResealer) CountMatching(ctx context.Context, fl *store.JobFilter) (int64, error) {
	return f.Store.(store.JobInspector).CountMatching(ctx, fl)
}

func (f *failingResealer) Reseal(ctx context.Context, rows []store.ResealParams) ([]bool, error) {
	f.mu.Lock()
	f.n--
	dead := f.n < 0
	f.mu.Unlock()
	if dead {
		return nil, errKilled
	}
	return f.Store.(store.Resealer).Reseal(ctx, rows)
}

func testReencryptResumes(t *testing.T, st store.Store) {
	if _, ok := st.(store.Resealer); !ok {
		t.Skipf("%T has no store.Resealer", st)
	}
	if _, ok := st.(store.JobInspector); !ok {
		t.Skipf("%T has no store.JobInspector", st)
	}
	ctx := t.Context()
	p1 := newScheduler(t, st, Ring(t, k1))
	ids := schedule(t, p1, "seal.re", 30, ax.SecretMetadata(map[string]string{"tok": "t"}))
	// Some finished, with results sealed by k1.
	w := newScheduler(t, st, Ring(t, k1))
	g := newGot()
	require.NoError(t, ax.HandleResult(w, "seal.re.done", g.handler()))
	done := schedule(t, p1, "seal.re.done", 5)
	require.NoError(t, w.Start(ctx))
	for _, id := range done {
		require.Equal(t, store.StateSucceeded, waitFinal(t, st, id).State)
	}
	require.NoError(t, w.Stop(ctx))
	ids = append(ids, done...)
	ids = append(ids, schedule(t, newScheduler(t, st, Ring(t, k2, k1)), "seal.re", 5)...)

	ring := Ring(t, k2, k1)
	killed := &failingResealer{Store: st, n: 2}
	a, err := ax.NewAdmin(ax.AdminConfig{Store: killed, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	prog, err := a.Reencrypt(ctx, ax.ReencryptOptions{BatchSize: 8})
	require.ErrorIs(t, err, errKilled)
	require.Equal(t, int64(16), prog.Scanned, "two batches went through before the kill")
	require.Positive(t, prog.Resealed)

	// k1 cannot leave yet: the refusal counts the jobs that need it.
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	err = admin.CheckKeyRemoval(ctx, "k1")
	var inUse *ax.KeyInUseError
	require.ErrorAs(t, err, &inUse)
	require.ErrorIs(t, err, ax.ErrKeyInUse)
	require.Equal(t, int64(35-16), inUse.Jobs, "%v", err)
	require.Contains(t, err.Error(), "19 job(s)")

	// Resumed where it stopped, it finishes; a full pass after it finds
	// nothing to do.
	rest, err := admin.Reencrypt(ctx, ax.ReencryptOptions{BatchSize: 8, After: prog.Last})
	require.NoError(t, err)
	require.Equal(t, int64(40-16), rest.Scanned)
	require.Equal(t, int64(35-16), rest.Resealed)
	again, err := admin.Reencrypt(ctx, ax.ReencryptOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(40), again.Scanned)
	require.Zero(t, again.Resealed)
	require.NoError(t, admin.CheckKeyRemoval(ctx, "k1"))
	usage, _, err := admin.KeyUsage(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k2": 40}, usage)

	// Without k1, every job still opens: payloads, metadata and results.
	only2, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: Ring(t, k2), Logger: zap.NewNop()})
	require.NoError(t, err)
	for _, id := range done {
		r, err := only2.Get(ctx, id)
		require.NoError(t, err)
		p, _ := g.get(id)
		require.JSONEq(t, fmt.Sprintf(`{"email":"result for %s","n":%d}`, secret, p.N), string(r.Result))
	}
	worker := newScheduler(t, st, Ring(t, k2))
	require.NoError(t, ax.HandleResult(worker, "seal.re", g.handler()))
	require.NoError(t, worker.Start(ctx))
	for _, id := range ids[:30] {
		require.Equal(t, store.StateSucceeded, waitFinal(t, st, id).State)
		_, md := g.get(id)
		require.Equal(t, "t", md["tok"])
	}
}

func testRefusals(t *testing.T, st store.Store) {
	s := newScheduler(t, st, Ring(t, k1))
	if _, ok := st.(store.FlowStore); ok {
		err := s.Handle("seal.part", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
			ax.PartitionBy(ax.PartitionByPayloadField("tenant"), ax.PartitionLimit{Concurrency: 1}))
		require.ErrorIs(t, err, ax.ErrInvalidOption)
		require.Contains(t, err.Error(), "encrypted")
		require.NoError(t, s.Handle("seal.part.md", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
			ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 1})))
	}
	plain := newScheduler(t, st, nil)
	_, err := plain.Schedule(t.Context(), "seal.plain", 1, ax.SecretMetadata(map[string]string{"a": "b"}))
	require.ErrorIs(t, err, ax.ErrInvalidOption)
	require.Contains(t, err.Error(), "Config.Keys")
}

func testLogs(t *testing.T, st store.Store) {
	core, logs := observer.New(zap.DebugLevel)
	events := &eventLog{}
	s := newScheduler(t, st, Ring(t, k1), func(c *ax.Config) {
		c.Logger = zap.New(core)
		c.Observers = []ax.Observer{events}
		c.RetryPolicy = ax.RetryPolicyFunc(func(int, error) time.Duration { return 0 })
	})
	require.NoError(t, ax.Handle(s, "seal.log", func(_ context.Context, _ *ax.Job, p payload) error {
		return errors.New("downstream refused the message") // no payload in it
	}, ax.MaxAttempts(2)))
	ids := schedule(t, s, "seal.log", 2, ax.SecretMetadata(map[string]string{"tok": secret}))
	require.NoError(t, s.Start(t.Context()))
	for _, id := range ids {
		require.Equal(t, store.StateDead, waitFinal(t, st, id).State)
	}
	require.NoError(t, s.Stop(t.Context()))
	require.NotZero(t, logs.Len())
	events.mu.Lock()
	defer events.mu.Unlock()
	require.NotEmpty(t, events.seen)
	for _, e := range events.seen {
		if e.JobID == uuid.Nil {
			continue // not a job's event
		}
		require.True(t, ax.IsSealed(e.Metadata["tok"]), "%s event: secret metadata %q", e.Kind, e.Metadata["tok"])
	}
	for _, e := range logs.All() {
		line := fmt.Sprintf("%s %v", e.Message, e.ContextMap())
		require.False(t, strings.Contains(line, secret), "log line holds a payload: %s", line)
	}
}

// eventLog records the events an Observer sees.
type eventLog struct {
	mu    sync.Mutex
	seen  []ax.Event
	added chan struct{} // signalled on each event once waitFor made it
}

func (l *eventLog) Observe(e ax.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, e)
	if l.added != nil {
		select {
		case l.added <- struct{}{}:
		default:
		}
	}
}

// waitFor waits, up to 30 seconds, until cond holds for the events seen:
// it is checked on every new event.
func (l *eventLog) waitFor(t *testing.T, cond func(seen []ax.Event) bool) {
	t.Helper()
	l.mu.Lock()
	if l.added == nil {
		l.added = make(chan struct{}, 1)
	}
	added := l.added
	l.mu.Unlock()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ok := cond(l.seen)
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-added:
		case <-deadline.C:
			t.Fatal("timed out waiting for events")
		}
	}
}
