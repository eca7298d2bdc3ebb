package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// derived is what a store derives for a job rather than taking it from
// the caller as is: the partition key (from the kind's PartitionBy), the
// kind's defaults for priority and attempts, the unique key's scope, the
// sequence key, and whether the payload is sealed (Config.Keys).
type derived struct {
	PartitionKey string
	Priority     int
	MaxAttempts  int
	Tenant       string
	Unique       store.UniqueScope
	SequenceKey  string
	Sealed       bool
}

// derivedOf reads id's derived columns: the store's own record (the
// payload as stored, sealed or not) and the Scheduler's (the opened
// payload, whose n names the unique key the caller gave). A job whose
// path keeps unique keys must have stored "u-<n>".
func derivedOf(t *testing.T, e *insertPathsEnv, id uuid.UUID, unique uniqueRule) derived {
	raw, err := e.st.Get(t.Context(), id)
	require.NoError(t, err)
	rec, err := e.s.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, "ip.job", rec.Kind)
	d := derived{raw.PartitionKey, raw.Priority, raw.MaxAttempts, rec.Metadata["tenant"], raw.Unique, raw.SequenceKey,
		ax.IsSealed(raw.Payload)}
	switch unique {
	case uniqueKept:
		var p struct{ N int }
		require.NoError(t, json.Unmarshal(rec.Payload, &p))
		require.Equal(t, fmt.Sprintf("u-%d", p.N), raw.UniqueKey, "the unique key given")
	case uniqueDropped:
		require.Empty(t, raw.UniqueKey, "a template's unique key is not kept (documented)")
	case uniqueTick:
		d.Unique = store.UniqueScope{} // the tick's own, the periodic scheduler's business
	}
	return d
}

// uniqueRule is what a path does with the unique key it is given.
type uniqueRule int

const (
	// uniqueKept: stored with its scope.
	uniqueKept uniqueRule = iota
	// uniqueDropped: a template's (Then, FollowUp, a batch's Completion),
	// inserted once by its parent's end, keeps none, as their docs say.
	uniqueDropped
	// uniqueTick: a periodic tick is given none; it has its tick's own.
	uniqueTick
)

// insertPathsEnv is a started Scheduler whose kind ip.job is partitioned by the
// metadata key "tenant", with kind defaults, and whose other kinds make
// ip.job jobs in every way AX can: Then, FollowUp, batch completion,
// periodic ticks.
type insertPathsEnv struct {
	s    *ax.Scheduler
	st   store.Store
	pool *pgxpool.Pool // nil on stores without transactions
}

const tenant = "t-42"

// uniqueHour is the unique scope every path's job is given.
var uniqueHour = store.UniqueScope{Period: time.Hour}

func tenantMD() ax.JobOption { return ax.Metadata(map[string]string{"tenant": tenant}) }

// jobOpts are the options every path gives job n of kind ip.job: its
// partition's metadata, a sequence, and a unique key for an hour.
func jobOpts(n int) []ax.ScheduleOption {
	return []ax.ScheduleOption{tenantMD(), ax.Sequential("s-1"), ax.UniqueKey(fmt.Sprintf("u-%d", n)), ax.UniqueFor(time.Hour)}
}

// payloadN is job n's payload.
func payloadN(n int) map[string]int { return map[string]int{"n": n} }

func newInsertPathsEnv(t *testing.T, st store.Store, pool *pgxpool.Pool) *insertPathsEnv {
	s := newScheduler(t, st, func(c *ax.Config) { c.Keys = insertPathsRing(t) })
	ok := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	require.NoError(t, s.Handle("ip.job", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return ax.Permanent(errors.New("dies, so that RunNow can bring it back"))
	}), ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 5}),
		ax.MaxAttempts(7), ax.Priority(ax.High)))
	require.NoError(t, s.Handle("ip.then", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
		return ax.Then(ctx, "ip.job", payloadN(1), jobOpts(1)...)
	})))
	require.NoError(t, s.Handle("ip.parent", ok))
	require.NoError(t, s.Handle("ip.child", ok))
	// Start stores the kinds' flow settings (PartitionBy) and defaults;
	// the running Scheduler then runs what makes template jobs.
	require.NoError(t, s.Start(t.Context()))
	return &insertPathsEnv{s: s, st: st, pool: pool}
}

// inTx runs fn in a transaction of the env's pool, committed.
func (e *insertPathsEnv) inTx(t *testing.T, fn func(tx pgx.Tx)) {
	require.NoError(t, pgx.BeginFunc(t.Context(), e.pool, func(tx pgx.Tx) error {
		fn(tx)
		return nil
	}))
}

// await polls find until it reports a job, and returns its ID: the
// started Scheduler runs the jobs that make it meanwhile.
func (e *insertPathsEnv) await(t *testing.T, what string, find func() (uuid.UUID, bool)) uuid.UUID {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if id, ok := find(); ok {
			return id
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s within 20s", what)
	return uuid.Nil
}

// followUpOf waits for the one job the store makes from a template of
// parent's (a follow-up or a Then job) and returns its ID.
func (e *insertPathsEnv) followUpOf(t *testing.T, parent uuid.UUID) uuid.UUID {
	return e.await(t, "follow-up of "+parent.String(), func() (uuid.UUID, bool) {
		got, err := e.st.(store.FollowUpStore).FollowUps(t.Context(), parent)
		require.NoError(t, err)
		if len(got) == 0 {
			return uuid.Nil, false
		}
		require.Len(t, got, 1)
		return got[0].ID, true
	})
}

// exists waits until the job id exists.
func (e *insertPathsEnv) exists(t *testing.T, id uuid.UUID) uuid.UUID {
	return e.await(t, "job "+id.String(), func() (uuid.UUID, bool) {
		_, err := e.st.Get(t.Context(), id)
		return id, err == nil
	})
}

// insertPaths are the ways a job of kind ip.job comes into the store
// through AX's API; each returns the job's ID. needsTx paths run only on
// stores that take a pgx.Tx. Every path but the periodic tick gives its
// job jobOpts; a tick's job has the tick's own unique key and no
// sequence.
var insertPaths = []struct {
	name    string
	needsTx bool
	unique  uniqueRule
	run     func(t *testing.T, e *insertPathsEnv) uuid.UUID
}{
	{"Schedule", false, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		res, err := e.s.Schedule(t.Context(), "ip.job", payloadN(1), append(jobOpts(1), ax.In(time.Hour))...)
		require.NoError(t, err)
		return res.ID
	}},
	{"ScheduleMany", false, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		res, err := e.s.ScheduleMany(t.Context(), []ax.Request{
			{Kind: "ip.parent", Options: []ax.ScheduleOption{ax.In(time.Hour)}},
			{Kind: "ip.job", Payload: payloadN(1), Options: append(jobOpts(1), ax.In(time.Hour))},
		})
		require.NoError(t, err)
		return res[1].ID
	}},
	{"ScheduleManyCopy", false, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		reqs := make([]ax.Request, 600)
		for i := range reqs {
			reqs[i] = ax.Request{Kind: "ip.job", Payload: payloadN(i), Options: append(jobOpts(i), ax.In(time.Hour))}
		}
		res, err := e.s.ScheduleMany(t.Context(), reqs)
		require.NoError(t, err)
		return res[599].ID
	}},
	{"ScheduleTx", true, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		var id uuid.UUID
		e.inTx(t, func(tx pgx.Tx) {
			res, err := e.s.ScheduleTx(t.Context(), tx, "ip.job", payloadN(1), append(jobOpts(1), ax.In(time.Hour))...)
			require.NoError(t, err)
			id = res.ID
		})
		return id
	}},
	{"ScheduleManyTx", true, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		var id uuid.UUID
		e.inTx(t, func(tx pgx.Tx) {
			res, err := e.s.ScheduleManyTx(t.Context(), tx, []ax.Request{
				{Kind: "ip.job", Payload: payloadN(1), Options: append(jobOpts(1), ax.In(time.Hour))},
				{Kind: "ip.job", Payload: payloadN(2), Options: append(jobOpts(2), ax.In(time.Hour))},
			})
			require.NoError(t, err)
			id = res[1].ID
		})
		return id
	}},
	{"ScheduleBatchChild", false, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		res, err := e.s.ScheduleBatch(t.Context(), ax.Batch{
			Children: []ax.Request{
				{Kind: "ip.job", Payload: payloadN(1), Options: append(jobOpts(1), ax.In(time.Hour))},
				{Kind: "ip.child", Options: []ax.ScheduleOption{ax.In(time.Hour)}},
			},
			Completion: ax.Request{Kind: "ip.parent"},
		})
		require.NoError(t, err)
		return res.Children[0].ID
	}},
	{"ScheduleBatchTxChild", true, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		var id uuid.UUID
		e.inTx(t, func(tx pgx.Tx) {
			res, err := e.s.ScheduleBatchTx(t.Context(), tx, ax.Batch{
				Children: []ax.Request{
					{Kind: "ip.job", Payload: payloadN(1), Options: append(jobOpts(1), ax.In(time.Hour))},
				},
				Completion: ax.Request{Kind: "ip.parent"},
			})
			require.NoError(t, err)
			id = res.Children[0].ID
		})
		return id
	}},
	{"BatchCompletion", false, uniqueDropped, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		res, err := e.s.ScheduleBatch(t.Context(), ax.Batch{
			Children:   []ax.Request{{Kind: "ip.child"}},
			Completion: ax.Request{Kind: "ip.job", Payload: payloadN(1), Options: jobOpts(1)},
		})
		require.NoError(t, err)
		return e.exists(t, res.Completion)
	}},
	{"FollowUp", false, uniqueDropped, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		res, err := e.s.Schedule(t.Context(), "ip.parent", nil,
			ax.FollowUp([]ax.State{ax.StateSucceeded}, "ip.job", payloadN(1), jobOpts(1)...))
		require.NoError(t, err)
		return e.followUpOf(t, res.ID)
	}},
	{"Then", false, uniqueDropped, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		res, err := e.s.Schedule(t.Context(), "ip.then", nil)
		require.NoError(t, err)
		return e.followUpOf(t, res.ID)
	}},
	{"PeriodicTick", false, uniqueTick, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		require.NoError(t, e.s.Every("ip-tick", "@every 1s", payloadN(1), ax.JobKind("ip.job"), tenantMD()))
		return e.await(t, "periodic tick", func() (uuid.UUID, bool) {
			jobs, err := e.st.(store.Lister).List(t.Context(), &store.ListParams{Kind: "ip.job", Limit: 10})
			require.NoError(t, err)
			if len(jobs) == 0 {
				return uuid.Nil, false
			}
			return jobs[0].ID, true
		})
	}},
	{"RunNowFromHistory", false, uniqueKept, func(t *testing.T, e *insertPathsEnv) uuid.UUID {
		res, err := e.s.Schedule(t.Context(), "ip.job", payloadN(1), jobOpts(1)...)
		require.NoError(t, err)
		e.await(t, "death of "+res.ID.String(), func() (uuid.UUID, bool) {
			rec, err := e.s.Get(t.Context(), res.ID)
			require.NoError(t, err)
			return res.ID, rec.State == ax.StateDead
		})
		if a, ok := e.st.(store.Archiver); ok {
			_, err := a.Archive(t.Context(), 1000)
			require.NoError(t, err)
		}
		rec, err := e.s.RunNow(t.Context(), res.ID)
		require.NoError(t, err)
		require.Equal(t, ax.StateScheduled, rec.State)
		return res.ID
	}},
}

// TestInsertPathsDeriveTheSameColumns (issue 40) schedules a job of one
// partitioned kind with kind defaults, a sequence and a unique key,
// sealed with a key ring, through every way AX inserts jobs, on
// PostgreSQL and in memory, and requires that each stored job has the
// columns the store derives (partition key, priority and attempts from
// the kind's defaults, unique scope, sequence key, sealing) exactly as
// Schedule's job has them. Batch children, follow-ups and periodic ticks
// lost their partition key on PostgreSQL in v1.0, which made partition
// limits isolate nothing there.
func TestInsertPathsDeriveTheSameColumns(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) (store.Store, *pgxpool.Pool)
	}{
		{"pgstore", func(t *testing.T) (store.Store, *pgxpool.Pool) { st, pool := newPG(t); return st, pool }},
		{"memstore", func(t *testing.T) (store.Store, *pgxpool.Pool) { return memstore.New(), nil }},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			for _, p := range insertPaths {
				t.Run(p.name, func(t *testing.T) {
					st, pool := sc.open(t)
					if p.needsTx && pool == nil {
						t.Skip("the store takes no transactions")
					}
					e := newInsertPathsEnv(t, st, pool)
					id := p.run(t, e)
					want := derived{PartitionKey: tenant, Priority: int(ax.High), MaxAttempts: 7, Tenant: tenant,
						Unique: uniqueHour, SequenceKey: "s-1", Sealed: true}
					switch p.unique {
					case uniqueDropped:
						want.Unique = store.UniqueScope{}
					case uniqueTick:
						want.Unique, want.SequenceKey = store.UniqueScope{}, ""
					}
					require.Equal(t, want, derivedOf(t, e, id, p.unique))
				})
			}
		})
	}
}

// insertPathsRing is a key ring of one key, which seals every payload.
func insertPathsRing(t *testing.T) *ax.KeyRing {
	k, err := ax.GenerateKey("ip-1")
	require.NoError(t, err)
	ring, err := ax.NewKeyRing(k)
	require.NoError(t, err)
	return ring
}
