package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/txapis"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// A caller's transaction costs one connection (issue 41): on sqlitestore
// it holds the store's one writer connection (DB), and nothing a call
// makes while it is open may wait for the writer: it would wait for the
// caller's transaction, which waits for the call. Reads go to the reader
// connections. The guard runs every API that takes a *sql.Tx, with jobs
// of every path (stored defaults, registry, partition, MaxPending,
// sequence, unique key, follow-up), and fails when the writer was waited
// for, or the call ran into its deadline; TestOneTxCoversEveryTxAPI fails
// when such an API is not in its tables.

const (
	remotePlain   = "remote.plain"
	remotePart    = "remote.part"
	remoteBounded = "remote.bounded"
)

var remoteKinds = []string{remotePlain, remotePart, remoteBounded}

// onetxStore is a store with the remote kinds declared (defaults: 7
// attempts, low priority), listed by a node, two of them flow kinds.
func onetxStore(t *testing.T) *sqlitestore.Store {
	t.Helper()
	st := newStore(t)
	ctx := t.Context()
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
	return st
}

// inOneTx runs call in a transaction of st's writer and fails t if call
// waited for the writer while the transaction was open (it then runs
// into its deadline).
func inOneTx(t *testing.T, st *sqlitestore.Store, call func(ctx context.Context, tx *sql.Tx) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	tx, err := st.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	waits := st.DB().Stats().WaitCount
	err = call(ctx, tx)
	require.Equal(t, waits, st.DB().Stats().WaitCount, "the call waited for the writer the caller's transaction holds")
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}

func onetxRequests(tag string, unique bool) []ax.Request {
	reqs := []ax.Request{
		{Kind: remotePlain, Payload: map[string]string{"tag": tag}},
		{Kind: remotePart, Payload: 1, Options: []ax.ScheduleOption{ax.Metadata(map[string]string{"tenant": "t1"})}},
		{Kind: remoteBounded, Payload: 2},
		{Kind: remotePlain, Payload: 3, Options: []ax.ScheduleOption{ax.Sequential("seq-" + tag)}},
		{Kind: remotePart, Payload: 5, Options: []ax.ScheduleOption{ax.FollowUp([]ax.State{ax.StateSucceeded}, remoteBounded, 6)}},
	}
	if unique {
		reqs = append(reqs, ax.Request{Kind: remotePlain, Payload: 4, Options: []ax.ScheduleOption{ax.UniqueKey("unique-" + tag)}})
	}
	return reqs
}

type remoteArgs struct {
	K string `json:"-"`
	N int    `json:"n"`
}

func (a remoteArgs) Kind() string { return a.K }

// onetxSchedules are the ax APIs that schedule in a *sql.Tx.
var onetxSchedules = map[string]func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, reqs []ax.Request) error{
	"ax.ScheduleTxOf": func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, reqs []ax.Request) error {
		for _, r := range reqs {
			if _, err := ax.ScheduleTxOf(ctx, s, tx, r.Kind, r.Payload, r.Options...); err != nil {
				return err
			}
		}
		return nil
	},
	"ax.ScheduleManyTxOf": func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, reqs []ax.Request) error {
		_, err := ax.ScheduleManyTxOf(ctx, s, tx, reqs)
		return err
	},
	"ax.EnqueueTx": func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, reqs []ax.Request) error {
		for i, r := range reqs {
			if _, err := ax.EnqueueTx(ctx, s, tx, remoteArgs{K: r.Kind, N: i}, r.Options...); err != nil {
				return err
			}
		}
		return nil
	},
	"ax.EnqueueManyTx": func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, reqs []ax.Request) error {
		args := make([]remoteArgs, len(reqs))
		for i, r := range reqs {
			args[i] = remoteArgs{K: r.Kind, N: i}
		}
		_, err := ax.EnqueueManyTx(ctx, s, tx, args)
		return err
	},
	"ax.ScheduleBatchTxOf": func(ctx context.Context, s *ax.Scheduler, tx *sql.Tx, reqs []ax.Request) error {
		var children []ax.Request
		for _, r := range reqs {
			if r.Payload != 4 { // the unique key: not on a batch child
				children = append(children, r)
			}
		}
		_, err := ax.ScheduleBatchTxOf(ctx, s, tx, ax.Batch{Children: children, Completion: ax.Request{Kind: remotePlain}})
		return err
	},
}

// TestOneTxSchedule: every ax API that schedules in a *sql.Tx, with and
// without Config.RefuseUnknownKinds and a key ring, on a fresh
// Scheduler, never waits for the writer the transaction holds.
func TestOneTxSchedule(t *testing.T) {
	key, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	ring, err := ax.NewKeyRing(key)
	require.NoError(t, err)
	variants := map[string]func(*ax.Config){
		"plain":                func(*ax.Config) {},
		"refuse unknown kinds": func(c *ax.Config) { c.RefuseUnknownKinds = true },
		"encrypted, MaxPending": func(c *ax.Config) {
			c.RefuseUnknownKinds, c.Keys, c.MaxPending = true, ring, 10_000
		},
	}
	for vname, edit := range variants {
		for name, schedule := range onetxSchedules {
			t.Run(vname+"/"+name, func(t *testing.T) {
				st := onetxStore(t)
				cfg := ax.Config{Store: st, Logger: zap.NewNop()}
				edit(&cfg)
				s, err := ax.New(cfg)
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Stop(context.Background()) })
				inOneTx(t, st, func(ctx context.Context, tx *sql.Tx) error {
					return schedule(ctx, s, tx, onetxRequests(vname+name, true))
				})
			})
		}
	}
}

// TestOneTxCompleteTxOf: a handler that records a result, adds Then jobs
// of every kind and ends its job with CompleteTxOf in its *sql.Tx gets
// no error: nothing waited for the writer its transaction holds (it
// would have run into the handler's deadline).
func TestOneTxCompleteTxOf(t *testing.T) {
	st := onetxStore(t)
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), RefuseUnknownKinds: true, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	require.NoError(t, s.Handle("local", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := func() error {
			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // no-op after Commit
			if err := ax.RecordResult(ctx, 1); err != nil {
				return err
			}
			for _, r := range onetxRequests("then", false) {
				if err := ax.Then(ctx, r.Kind, r.Payload, r.Options...); err != nil {
					return err
				}
			}
			if err := ax.CompleteTxOf(ctx, s, tx); err != nil {
				return err
			}
			return tx.Commit()
		}()
		done <- err
		return err
	}), ax.CompletesInTx[*sql.Tx]()))
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	res, err := s.Schedule(t.Context(), "local", nil, ax.FollowUp([]ax.State{ax.StateSucceeded}, remotePart, 1))
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not run")
	}
	ups, err := st.FollowUps(t.Context(), res.ID)
	require.NoError(t, err)
	require.Len(t, ups, 6, "five Then jobs and the FollowUp")
	for _, u := range ups {
		require.Equal(t, 7, u.MaxAttempts, "kind %s: its stored defaults", u.Kind)
	}
}

// onetxStoreCalls are sqlitestore's own methods that take a *sql.Tx.
var onetxStoreCalls = map[string]func(ctx context.Context, st *sqlitestore.Store, tx *sql.Tx, lease store.Lease) error{
	"sqlitestore.Store.InsertTx": func(ctx context.Context, st *sqlitestore.Store, tx *sql.Tx, _ store.Lease) error {
		_, err := st.InsertTx(ctx, tx, storeJobs(true))
		return err
	},
	"sqlitestore.Store.InsertBatchTx": func(ctx context.Context, st *sqlitestore.Store, tx *sql.Tx, _ store.Lease) error {
		_, err := st.InsertBatchTx(ctx, tx, &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Children: storeJobs(false), Completion: storeJob(remoteBounded)})
		return err
	},
	"sqlitestore.Store.CompleteTx": func(ctx context.Context, st *sqlitestore.Store, tx *sql.Tx, lease store.Lease) error {
		ok, err := st.CompleteTx(ctx, tx, store.FinishParams{Lease: lease, Outcome: store.OutcomeSucceeded,
			Result: []byte(`{"ok":true}`), Then: storeJobs(false)})
		if err == nil && !ok {
			err = errors.New("lease lost")
		}
		return err
	},
}

func storeJob(kind string, edit ...func(*store.InsertParams)) store.InsertParams {
	p := store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: kind, Payload: []byte(`{"n":1}`),
		Priority: store.PriorityNormal, MaxAttempts: 3}
	for _, e := range edit {
		e(&p)
	}
	return p
}

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

// TestOneTxStore: sqlitestore's methods that take a *sql.Tx never wait
// for the writer the transaction holds; CompleteTx ends a batch child of
// a MaxPending kind with a follow-up, a result and Then jobs.
func TestOneTxStore(t *testing.T) {
	names := make([]string, 0, len(onetxStoreCalls))
	for name := range onetxStoreCalls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			st := onetxStore(t)
			ctx := t.Context()
			child := storeJob(remoteBounded, func(p *store.InsertParams) {
				p.FollowUps = []store.FollowUp{{On: []store.State{store.StateSucceeded}, Job: storeJob(remotePart)}}
			})
			_, err := st.InsertBatch(ctx, &store.BatchParams{ID: uuid.Must(uuid.NewV7()), Children: []store.InsertParams{child}, Completion: storeJob(remotePlain)})
			require.NoError(t, err)
			res, err := st.Claim(ctx, &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: remoteBounded, Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			lease := store.Lease{ID: res.Jobs[0].ID, Token: res.Jobs[0].LeaseToken}
			inOneTx(t, st, func(ctx context.Context, tx *sql.Tx) error {
				return onetxStoreCalls[name](ctx, st, tx, lease)
			})
		})
	}
}

// TestOneTxCoversEveryTxAPI fails for an API of sqlitestore, or a generic
// one of the ax package, that takes a transaction and that the guard's
// tables do not run. The ax package's pgx.Tx forms are guarded on
// PostgreSQL (internal/e2e/onetx_test.go).
func TestOneTxCoversEveryTxAPI(t *testing.T) {
	covered := map[string]bool{"ax.CompleteTxOf": true}
	for name := range onetxSchedules {
		covered[name] = true
	}
	for name := range onetxStoreCalls {
		covered[name] = true
	}
	found, err := txapis.List("sqlitestore", ".")
	require.NoError(t, err)
	require.NotEmpty(t, found)
	root, err := txapis.List("ax", "../..")
	require.NoError(t, err)
	for _, name := range root {
		if !covered[name] && !pgxOnly[name] {
			found = append(found, name)
		}
	}
	for _, name := range found {
		if !covered[name] {
			t.Errorf("%s takes a caller's transaction but the one-connection guard does not run it on sqlitestore", name)
		}
	}
}

// pgxOnly are the ax APIs that take a pgx.Tx, which sqlitestore does not.
var pgxOnly = map[string]bool{
	"ax.Scheduler.ScheduleTx": true, "ax.Scheduler.ScheduleManyTx": true,
	"ax.Scheduler.ScheduleBatchTx": true, "ax.Scheduler.CompleteTx": true,
}
