package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/internal/txapis"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// A caller's transaction costs exactly one connection (store.TxReader,
// store/pgstore/doc.go). The guard below runs every API that takes a
// caller's transaction on a pool of exactly one connection, with cold
// caches (a fresh Store and Scheduler each time, so that every read that
// can happen does), and fails on any acquire made for the call while the
// transaction is open: such an acquire waits for the connection the
// transaction holds, for ever on a pool whose request transactions hold
// every connection (issue 41; before it, CompleteTx's day partitions and
// flow inserts). TestOneTxCoversEveryTxAPI fails when an API that takes a
// transaction is added without a row here.

// onCall marks the context of the call under test (and of the handler
// under test): acquires made with another context are the Scheduler's own
// background work, which may wait for the connection.
type onCall struct{}

// errSecondAcquire ends an acquire the guard caught, at once.
var errSecondAcquire = errors.New("second connection acquired while the caller's transaction is open")

// acquireGuard is a pgxpool.AcquireTracer that catches acquires made for
// the call under test while its transaction is open: it records where
// they came from and fails them at once (a pool of one would make them
// wait until the call's deadline).
type acquireGuard struct {
	mu     sync.Mutex
	open   bool
	caught []string
}

func (g *acquireGuard) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if ctx.Value(onCall{}) == nil {
		return ctx
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		return ctx
	}
	g.caught = append(g.caught, string(debug.Stack()))
	c, cancel := context.WithCancelCause(ctx)
	cancel(errSecondAcquire)
	return c
}

func (g *acquireGuard) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

// TraceQueryStart and TraceQueryEnd make the guard a pgx.QueryTracer,
// which ConnConfig.Tracer must be; pgxpool finds the acquire tracer in it.
func (g *acquireGuard) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (g *acquireGuard) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// setOpen says whether the caller's transaction is open.
func (g *acquireGuard) setOpen(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
}

// check fails t with the stacks of the acquires caught.
func (g *acquireGuard) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.caught) > 0 {
		t.Fatalf("%d acquire(s) of a second connection while the caller's transaction was open; the first from:\n%s", len(g.caught), g.caught[0])
	}
}

// The kinds of the guard. The remote ones are handled by another node
// (listed in the registry, for Config.RefuseUnknownKinds) with stored
// defaults (read by a host that does not handle them); two are flow
// kinds: a partition source, a MaxPending.
const (
	remotePlain   = "remote.plain"
	remotePart    = "remote.part"
	remoteBounded = "remote.bounded"
	localParent   = "local.parent"
	localFlow     = "local.flow"
)

var remoteKinds = []string{remotePlain, remotePart, remoteBounded}

// onetxDB is a migrated database with the remote kinds declared: their
// defaults (7 attempts, low priority), their node, their flows.
func onetxDB(t *testing.T) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	st, err := pgstore.New(ctx, pgtest.PoolFor(t, dsn))
	require.NoError(t, err)
	defer st.Close() //nolint:errcheck // a test store
	var defaults []store.KindDefaults
	for _, k := range remoteKinds {
		defaults = append(defaults, store.KindDefaults{Kind: k, MaxAttempts: 7, Priority: store.PriorityLow})
	}
	require.NoError(t, st.DeclareKindDefaults(ctx, defaults))
	require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "remote", Kinds: remoteKinds, TTL: time.Hour}))
	require.NoError(t, st.SetFlows(ctx, &store.SetFlowsParams{Node: "remote", Flows: []store.FlowConfig{
		{Kind: remotePart, Partition: store.PartitionSource{Metadata: "tenant"}, PartitionConcurrency: 1},
		{Kind: remoteBounded, MaxPending: 1000},
	}}))
	return dsn
}

// guarded returns a Store on dsn whose pool has exactly one connection,
// watched by a fresh guard.
func guarded(t *testing.T, dsn string) (*pgstore.Store, *pgxpool.Pool, *acquireGuard) {
	t.Helper()
	pool, g := guardedPool(t, dsn)
	st, err := pgstore.New(t.Context(), pool, pgstore.WithoutMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st, pool, g
}

// guardedPool returns a pool of one connection on dsn, watched by the
// guard it returns.
func guardedPool(t *testing.T, dsn string) (*pgxpool.Pool, *acquireGuard) {
	t.Helper()
	g := &acquireGuard{}
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns, cfg.MinConns = 1, 0
	cfg.ConnConfig.Tracer = g
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, g
}

// inGuardedTx runs call in a transaction of pool with g watching that no
// second connection is acquired while it is open, then commits.
func inGuardedTx(t *testing.T, pool *pgxpool.Pool, g *acquireGuard, call func(ctx context.Context, tx pgx.Tx) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), onCall{}, true), 20*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	g.setOpen(true)
	err = call(ctx, tx)
	g.setOpen(false)
	g.check(t)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// onetxVariant is one configuration every API runs under.
type onetxVariant struct {
	name   string
	secret bool // with a key ring: jobs carry SecretMetadata
	edit   func(*ax.Config)
}

func onetxVariants(t *testing.T) []onetxVariant {
	key, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	ring, err := ax.NewKeyRing(key)
	require.NoError(t, err)
	return []onetxVariant{
		{"plain", false, func(*ax.Config) {}},
		{"refuse unknown kinds", false, func(c *ax.Config) { c.RefuseUnknownKinds = true }},
		{"encrypted", true, func(c *ax.Config) { c.Keys = ring }},
		{"refuse unknown kinds, encrypted, MaxPending", true, func(c *ax.Config) { c.RefuseUnknownKinds, c.Keys, c.MaxPending = true, ring, 10_000 }},
	}
}

// onetxRequests are the jobs scheduled in the caller's transaction: each
// needs a store read that a cold cache makes (the kind's defaults, the
// registry, the flow kinds), or a path of its own (sequence, follow-up,
// secret metadata, and with unique a unique key, which batch children
// and Then jobs cannot have).
func onetxRequests(tag string, secret, unique bool) []ax.Request {
	md := ax.Metadata(map[string]string{"tenant": "t2"})
	if secret {
		md = ax.SecretMetadata(map[string]string{"card": "4242"})
	}
	reqs := []ax.Request{
		{Kind: remotePlain, Payload: map[string]string{"tag": tag}},
		{Kind: remotePart, Payload: 1, Options: []ax.ScheduleOption{ax.Metadata(map[string]string{"tenant": "t1"})}},
		{Kind: remoteBounded, Payload: 2},
		{Kind: remotePlain, Payload: 3, Options: []ax.ScheduleOption{ax.Sequential("seq-" + tag)}},
		{Kind: remotePart, Payload: 5, Options: []ax.ScheduleOption{md, ax.FollowUp([]ax.State{ax.StateSucceeded}, remoteBounded, 6)}},
	}
	if unique {
		reqs = append(reqs, ax.Request{Kind: remotePlain, Payload: 4, Options: []ax.ScheduleOption{ax.UniqueKey("unique-" + tag)}})
	}
	return reqs
}

// remoteArgs is a typed job of a remote kind, for EnqueueTx.
type remoteArgs struct {
	K string `json:"-"`
	N int    `json:"n"`
}

func (a remoteArgs) Kind() string { return a.K }

// onetxSchedule is an API that schedules in a caller's transaction; it
// returns the IDs of the jobs it scheduled with their kinds' defaults.
type onetxSchedule struct {
	covers []string // the APIs it runs, as TestOneTxCoversEveryTxAPI names them
	run    func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error)
}

// onetxInserts is what every ax API here runs of pgstore: InTx (the
// store's own methods that take a tx are called directly by
// TestOneTxStore, with a context that does not carry tx).
var onetxInserts = []string{"pgstore.Store.InTx"}

func ids(res []ax.ScheduleResult) []uuid.UUID {
	out := make([]uuid.UUID, len(res))
	for i, r := range res {
		out[i] = r.ID
	}
	return out
}

// onetxSchedules are the ax APIs that schedule in a pgx.Tx. Those of one
// job run once a request, each on its own cold Scheduler; the others with
// all the requests at once.
var onetxSchedules = map[string]onetxSchedule{
	"ScheduleTx": {append([]string{"ax.Scheduler.ScheduleTx"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			r, err := s.ScheduleTx(ctx, tx, reqs[0].Kind, reqs[0].Payload, reqs[0].Options...)
			return []uuid.UUID{r.ID}, err
		}},
	"ScheduleTxOf": {append([]string{"ax.ScheduleTxOf"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			r, err := ax.ScheduleTxOf(ctx, s, tx, reqs[0].Kind, reqs[0].Payload, reqs[0].Options...)
			return []uuid.UUID{r.ID}, err
		}},
	"EnqueueTx": {append([]string{"ax.EnqueueTx"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			r, err := ax.EnqueueTx(ctx, s, tx, remoteArgs{K: reqs[0].Kind, N: 1}, reqs[0].Options...)
			return []uuid.UUID{r.ID}, err
		}},
	"ScheduleManyTx": {append([]string{"ax.Scheduler.ScheduleManyTx"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			res, err := s.ScheduleManyTx(ctx, tx, reqs)
			return ids(res), err
		}},
	"ScheduleManyTxOf": {append([]string{"ax.ScheduleManyTxOf"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			res, err := ax.ScheduleManyTxOf(ctx, s, tx, reqs)
			return ids(res), err
		}},
	"EnqueueManyTx": {append([]string{"ax.EnqueueManyTx"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			args := make([]remoteArgs, len(reqs))
			for i, r := range reqs {
				args[i] = remoteArgs{K: r.Kind, N: i}
			}
			res, err := ax.EnqueueManyTx(ctx, s, tx, args)
			return ids(res), err
		}},
	"ScheduleBatchTx": {append([]string{"ax.Scheduler.ScheduleBatchTx"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			b, err := s.ScheduleBatchTx(ctx, tx, ax.Batch{Children: reqs, Completion: ax.Request{Kind: remotePlain}})
			if err != nil {
				return nil, err
			}
			return ids(b.Children), nil // the completion job is inserted when they end
		}},
	"ScheduleBatchTxOf": {append([]string{"ax.ScheduleBatchTxOf"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx, reqs []ax.Request) ([]uuid.UUID, error) {
			b, err := ax.ScheduleBatchTxOf(ctx, s, tx, ax.Batch{Children: reqs, Completion: ax.Request{Kind: remoteBounded}})
			if err != nil {
				return nil, err
			}
			return ids(b.Children), nil // the completion job is inserted when they end
		}},
}

// TestOneTxSchedule: every API that schedules in a caller's transaction,
// under every variant, with every kind of job, on a pool of one
// connection and cold caches, acquires no second connection while the
// transaction is open; the jobs it scheduled got their kinds' stored
// defaults (read on the transaction) once it committed.
func TestOneTxSchedule(t *testing.T) {
	dsn := onetxDB(t)
	names := make([]string, 0, len(onetxSchedules))
	for name := range onetxSchedules {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, v := range onetxVariants(t) {
		for _, name := range names {
			api := onetxSchedules[name]
			single := !strings.Contains(name, "Many") && !strings.Contains(name, "Batch")
			reqs := onetxRequests(v.name+name, v.secret, !strings.Contains(name, "Batch"))
			groups := [][]ax.Request{reqs}
			if single {
				groups = nil
				for _, r := range reqs {
					groups = append(groups, []ax.Request{r})
				}
			}
			for i, group := range groups {
				t.Run(fmt.Sprintf("%s/%s/%d", v.name, name, i), func(t *testing.T) {
					st, pool, g := guarded(t, dsn)
					s := newScheduler(t, st, v.edit)
					ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), onCall{}, true), 20*time.Second)
					defer cancel()
					tx, err := pool.Begin(ctx)
					require.NoError(t, err)
					defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
					g.setOpen(true)
					got, err := api.run(ctx, s, tx, group)
					g.setOpen(false)
					g.check(t)
					require.NoError(t, err)
					require.NoError(t, tx.Commit(ctx))
					for _, id := range got {
						rec, err := s.Get(t.Context(), id)
						require.NoError(t, err)
						require.Equal(t, 7, rec.MaxAttempts, "kind %s: its stored defaults", rec.Kind)
						require.Equal(t, store.PriorityLow, rec.Priority, "kind %s: its stored defaults", rec.Kind)
					}
				})
			}
		}
	}
}

// onetxCompletion is a way a handler ends its job in its transaction.
type onetxCompletion struct {
	covers   []string
	complete func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx) error
}

var onetxCompletions = map[string]onetxCompletion{
	"CompleteTx": {append([]string{"ax.Scheduler.CompleteTx"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx) error { return s.CompleteTx(ctx, tx) }},
	"CompleteTxOf": {append([]string{"ax.CompleteTxOf"}, onetxInserts...),
		func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx) error { return ax.CompleteTxOf(ctx, s, tx) }},
}

// TestOneTxComplete: a handler that ends its job in its own transaction
// (CompleteTx, CompleteTxOf) with a result and Then jobs of every kind
// (stored defaults, registry, partition, MaxPending, sequence), its job
// with a FollowUp, a batch child, or of a flow kind, under every
// variant, on a pool of one connection and cold caches, acquires no
// second connection while its transaction is open; its job succeeds.
func TestOneTxComplete(t *testing.T) {
	dsn := onetxDB(t)
	parents := []struct {
		name     string
		kind     string
		schedule func(ctx context.Context, s *ax.Scheduler, kind string) (uuid.UUID, error)
	}{
		{"plain", localParent, func(ctx context.Context, s *ax.Scheduler, kind string) (uuid.UUID, error) {
			r, err := s.Schedule(ctx, kind, 1)
			return r.ID, err
		}},
		{"with a FollowUp", localParent, func(ctx context.Context, s *ax.Scheduler, kind string) (uuid.UUID, error) {
			r, err := s.Schedule(ctx, kind, 1, ax.FollowUp([]ax.State{ax.StateSucceeded}, remotePart, 2))
			return r.ID, err
		}},
		{"batch child", localParent, func(ctx context.Context, s *ax.Scheduler, kind string) (uuid.UUID, error) {
			b, err := s.ScheduleBatch(ctx, ax.Batch{Children: []ax.Request{{Kind: kind, Payload: 1}}, Completion: ax.Request{Kind: remotePlain}})
			if err != nil {
				return uuid.Nil, err
			}
			return b.Children[0].ID, nil
		}},
		{"flow kind", localFlow, func(ctx context.Context, s *ax.Scheduler, kind string) (uuid.UUID, error) {
			r, err := s.Schedule(ctx, kind, 1, ax.Metadata(map[string]string{"tenant": "t1"}))
			return r.ID, err
		}},
	}
	names := []string{"CompleteTx", "CompleteTxOf"}
	for _, v := range onetxVariants(t) {
		for _, name := range names {
			completion := onetxCompletions[name]
			for _, parent := range parents {
				t.Run(fmt.Sprintf("%s/%s/%s", v.name, name, parent.name), func(t *testing.T) {
					st, pool, g := guarded(t, dsn)
					s := newScheduler(t, st, v.edit)
					done := make(chan error, 1)
					handler := ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
						ctx = context.WithValue(ctx, onCall{}, true)
						err := completeInTx(ctx, s, pool, g, v.secret, completion.complete)
						done <- err
						return err
					})
					require.NoError(t, s.Handle(localParent, handler))
					require.NoError(t, s.Handle(localFlow, handler, ax.MaxPending(1000),
						ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 1})))
					require.NoError(t, s.Start(t.Context()))
					id, err := parent.schedule(t.Context(), s, parent.kind)
					require.NoError(t, err)
					select {
					case err := <-done:
						g.check(t)
						require.NoError(t, err)
					case <-time.After(30 * time.Second):
						t.Fatal("the handler did not run")
					}
					waitState(t, s, id, ax.StateSucceeded, 10*time.Second)
				})
			}
		}
	}
}

// completeInTx is the handler's work: in its transaction, a result, Then
// jobs of every kind, and the completion; then the commit.
func completeInTx(ctx context.Context, s *ax.Scheduler, pool *pgxpool.Pool, g *acquireGuard, secret bool,
	complete func(ctx context.Context, s *ax.Scheduler, tx pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	g.setOpen(true)
	err = func() error {
		if err := ax.RecordResult(ctx, map[string]int{"n": 1}); err != nil {
			return err
		}
		for _, r := range onetxRequests("then", secret, false) {
			if err := ax.Then(ctx, r.Kind, r.Payload, r.Options...); err != nil {
				return err
			}
		}
		return complete(ctx, s, tx)
	}()
	g.setOpen(false)
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// storeJob is a job of kind with its defaults set, as the ax package
// sends it.
func storeJob(kind string, edit ...func(*store.InsertParams)) store.InsertParams {
	p := store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: kind, Payload: []byte(`{"n":1}`),
		Priority: store.PriorityNormal, MaxAttempts: 3}
	for _, e := range edit {
		e(&p)
	}
	return p
}

// storeJobs are jobs of every kind of path: a partition, a MaxPending, a
// sequence, a follow-up, and with unique a unique key.
func storeJobs(unique bool) []store.InsertParams {
	jobs := []store.InsertParams{
		storeJob(remotePlain),
		storeJob(remotePart, func(p *store.InsertParams) { p.Metadata = map[string]string{"tenant": "t1"} }),
		storeJob(remoteBounded),
		storeJob(remotePlain, func(p *store.InsertParams) { p.SequenceKey = "seq" }),
		storeJob(remotePlain, func(p *store.InsertParams) {
			p.FollowUps = []store.FollowUp{{On: []store.State{store.StateSucceeded}, Job: storeJob(remoteBounded)}}
		}),
	}
	if unique {
		jobs = append(jobs, storeJob(remotePlain, func(p *store.InsertParams) { p.UniqueKey = "u1" }))
	}
	return jobs
}

// onetxStoreCalls are pgstore's own methods that take a caller's
// transaction, called directly (the ax package binds the transaction to
// its context with InTx; a caller of pgstore need not): each acquires no
// second connection while tx is open, on a cold Store. prepare runs
// before tx begins.
var onetxStoreCalls = map[string]struct {
	prepare func(t *testing.T, st *pgstore.Store) store.Lease
	call    func(ctx context.Context, st *pgstore.Store, tx pgx.Tx, lease store.Lease) error
}{
	"Store.InsertTx": {nil, func(ctx context.Context, st *pgstore.Store, tx pgx.Tx, _ store.Lease) error {
		_, err := st.InsertTx(ctx, tx, storeJobs(true))
		return err
	}},
	"Store.InsertBatchTx": {nil, func(ctx context.Context, st *pgstore.Store, tx pgx.Tx, _ store.Lease) error {
		_, err := st.InsertBatchTx(ctx, tx, &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Children: storeJobs(false), Completion: storeJob(remoteBounded)})
		return err
	}},
	"Store.CompleteTx": {claimedJob, func(ctx context.Context, st *pgstore.Store, tx pgx.Tx, lease store.Lease) error {
		ok, err := st.CompleteTx(ctx, tx, store.FinishParams{Lease: lease, Outcome: store.OutcomeSucceeded,
			Result: []byte(`{"ok":true}`), Then: storeJobs(false)})
		if err == nil && !ok {
			err = errors.New("lease lost")
		}
		return err
	}},
	"Store.InTx": {nil, func(ctx context.Context, st *pgstore.Store, tx pgx.Tx, _ store.Lease) error {
		ctx = st.InTx(ctx, tx)
		if _, err := st.KindDefaults(ctx, remoteKinds); err != nil {
			return err
		}
		_, err := st.ListNodes(ctx)
		return err
	}},
}

// claimedJob inserts a job of a MaxPending kind, with a follow-up, as a
// batch child, and claims it.
func claimedJob(t *testing.T, st *pgstore.Store) store.Lease {
	t.Helper()
	ctx := t.Context()
	child := storeJob(remoteBounded, func(p *store.InsertParams) {
		p.FollowUps = []store.FollowUp{{On: []store.State{store.StateSucceeded}, Job: storeJob(remotePart)}}
	})
	_, err := st.InsertBatch(ctx, &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Children: []store.InsertParams{child}, Completion: storeJob(remotePlain)})
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: remoteBounded, Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	return store.Lease{ID: res.Jobs[0].ID, Token: res.Jobs[0].LeaseToken}
}

// TestOneTxStore: pgstore's methods that take a caller's transaction,
// called directly with a context that does not carry it, on a pool of
// one connection and a cold Store, acquire no second connection while
// the transaction is open.
func TestOneTxStore(t *testing.T) {
	dsn := onetxDB(t)
	names := make([]string, 0, len(onetxStoreCalls))
	for name := range onetxStoreCalls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := onetxStoreCalls[name]
		t.Run(name, func(t *testing.T) {
			st, pool, g := guarded(t, dsn)
			var lease store.Lease
			if c.prepare != nil {
				lease = c.prepare(t, st)
				// Cold again: prepare's calls filled the caches.
				var err error
				st, err = pgstore.New(t.Context(), pool, pgstore.WithoutMigrate())
				require.NoError(t, err)
				t.Cleanup(func() { _ = st.Close() })
			}
			inGuardedTx(t, pool, g, func(ctx context.Context, tx pgx.Tx) error { return c.call(ctx, st, tx, lease) })
		})
	}
}

// TestOneTxCoversEveryTxAPI lists the exported functions and methods of
// the ax package and of pgstore that take a caller's transaction (a
// parameter named tx, or of type pgx.Tx, *sql.Tx or a type parameter Tx)
// and fails for any that the guard's tables do not run.
func TestOneTxCoversEveryTxAPI(t *testing.T) {
	covered := map[string]bool{}
	for _, a := range onetxSchedules {
		for _, c := range a.covers {
			covered[c] = true
		}
	}
	for _, c := range onetxCompletions {
		for _, n := range c.covers {
			covered[n] = true
		}
	}
	for name := range onetxStoreCalls {
		covered["pgstore."+name] = true
	}
	for name := range onetxCitusCalls {
		covered["pgstore."+name] = true
	}
	var found []string
	for pkg, dir := range map[string]string{"ax": "../..", "pgstore": "../../store/pgstore"} {
		apis, err := txapis.List(pkg, dir)
		require.NoError(t, err)
		found = append(found, apis...)
	}
	require.NotEmpty(t, found)
	for _, name := range found {
		if !covered[name] {
			t.Errorf("%s takes a caller's transaction but the one-connection guard does not run it: add it to onetxSchedules, onetxCompletions or onetxStoreCalls", name)
		}
	}
}
