package ax

import (
	"context"
	"errors"
	"fmt"
	"github.com/google/uuid"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// Errors of the operator API, besides ErrNotFound, ErrInvalidOption and
// errors.ErrUnsupported. Match them with errors.Is.
var (
	// ErrInvalidFilter is returned for a JobFilter the store cannot
	// answer: an unknown state or priority, a text that is not valid
	// UTF-8 or holds a NUL byte, a time outside 1970 to 9999, more than
	// store.MaxFilterValues values in a list. Nothing was changed.
	ErrInvalidFilter = errors.New("ax: invalid job filter")

	// ErrInvalidCursor is returned by Admin.List for a cursor that no
	// listing returned (mangled, truncated, or made for the other order).
	ErrInvalidCursor = errors.New("ax: invalid list cursor")

	// ErrFilterMatchesAll is returned by Admin.DeleteJobs for a filter
	// that selects every job, unless MatchAll is given: deleting
	// everything must be asked for explicitly. Nothing was deleted.
	ErrFilterMatchesAll = errors.New("ax: filter matches every job")

	// ErrScheduleNotFound is returned for a periodic schedule name the
	// store does not know (never declared by a running host).
	ErrScheduleNotFound = errors.New("ax: periodic schedule not found")
)

// AdminConfig configures NewAdmin.
type AdminConfig struct {
	// Store is the cluster's store. Required.
	Store store.Store

	// Logger receives one info line per change an Admin makes (pauses,
	// bulk changes, triggers), naming what changed: an audit trail.
	// Defaults to a logger writing warnings and errors to standard error,
	// like Config.Logger; zap.NewNop() silences it.
	Logger *zap.Logger

	// Clock is the host clock, for tests; it only stamps Stats.At.
	// Defaults to time.Now.
	Clock func() time.Time

	// Keys, when set, opens the jobs sealed by Config.Keys: Get, List and
	// FollowUps return their payloads, results and secret metadata plain
	// (without it, as the sealed envelopes, which IsSealed recognizes), and
	// Reencrypt re-seals stored jobs with its current key. A Scheduler's
	// Admin uses Config.Keys.
	Keys *KeyRing

	// UnhandledKindGrace is how long a kind's jobs may be due with no
	// running node handling it before Kinds and Stats report the kind
	// unhandled; see Config.UnhandledKindGrace. Defaults to
	// DefaultUnhandledKindGrace; a Scheduler's Admin uses its Config's.
	UnhandledKindGrace time.Duration
}

// Admin is the operator's view of a cluster: it lists, counts and changes
// jobs by filter, pauses whole kinds and periodic schedules, and reads
// nodes, the maintenance leader and the queue. Everything it does goes
// through the store, so it acts on the whole cluster, and it works from a
// process that runs no jobs (a CLI, an admin HTTP handler, a deploy step):
// NewAdmin needs nothing but a store. A Scheduler has one too
// (Scheduler.Admin), which adds what only that host can do at once: it
// stops claiming a kind the moment it pauses it, and wakes for jobs it
// makes due.
//
// Admin is a type of its own rather than methods on Scheduler because
// nothing in it is about one host: a Scheduler is a node (a name,
// workers, handlers, leases), and a tool that only inspects the queue
// should not have to pretend to be one. (asynq splits its Inspector from
// its Server for the same reason.)
//
// Each ability needs an optional store interface (store/inspect.go):
// listing and counting store.JobInspector, bulk changes
// store.BulkController, kind pauses store.KindPauser, schedules
// store.PeriodicController, the leader store.LeaderReader, the oldest due
// jobs store.DueInspector. A method whose interface the store lacks
// returns an error wrapping errors.ErrUnsupported. memstore implements
// them all.
//
// Its methods are safe for concurrent use. Every record it returns
// marshals to plain JSON (payloads raw, times in RFC 3339, states by
// name, unset times left out).
type Admin struct {
	store store.Store
	log   *zap.Logger
	now   func() time.Time
	// sched is the Scheduler this Admin belongs to, or nil.
	sched *Scheduler
	// keys opens sealed jobs (AdminConfig.Keys; see keyRing).
	keys *KeyRing
	// grace is AdminConfig.UnhandledKindGrace (unhandled.go).
	grace time.Duration
	// secretsSealed leaves secret metadata sealed in the records read
	// (WithSecretMetadataSealed).
	secretsSealed bool
}

// WithSecretMetadataSealed returns a copy of the Admin whose reads (Get,
// List, FindByIDPrefix, FindByIDPrefixBrief, FollowUps) leave the
// metadata values given with SecretMetadata sealed, while payloads and
// results open as before: for readers who may see jobs but not their
// secrets, such as axhttp's read-only keys on a server with the key
// ring. Tools show such values as encrypted. Everything else is the
// Admin's.
func (a *Admin) WithSecretMetadataSealed() *Admin {
	c := *a
	c.secretsSealed = true
	return &c
}

// NewAdmin returns an Admin on cfg.Store for a process that need not run
// a Scheduler. It returns an error wrapping ErrInvalidConfig without a
// Store or with a negative UnhandledKindGrace.
func NewAdmin(cfg AdminConfig) (*Admin, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("ax.NewAdmin: %w: Store is nil", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = defaultLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.UnhandledKindGrace < 0 {
		return nil, fmt.Errorf("ax.NewAdmin: %w: UnhandledKindGrace is negative (%s)", ErrInvalidConfig, cfg.UnhandledKindGrace)
	}
	setDefault(&cfg.UnhandledKindGrace, DefaultUnhandledKindGrace)
	return &Admin{store: cfg.Store, log: cfg.Logger, now: cfg.Clock, keys: cfg.Keys, grace: cfg.UnhandledKindGrace}, nil
}

// Admin returns the Scheduler's Admin, on its store and logger. Besides
// what any Admin does, it applies this host's side of a change at once:
// a kind it pauses is no longer claimed here from the call on (other
// hosts stop within a HeartbeatInterval), one it resumes is claimed at
// once, and jobs it makes due wake this host. It works whatever the
// Scheduler's phase, also before Start and after Stop (the store must
// still be open).
func (s *Scheduler) Admin() *Admin { return s.admin }

// newSchedulerAdmin is the Admin of s, made by New.
func newSchedulerAdmin(s *Scheduler) *Admin {
	return &Admin{store: s.store, log: s.log, now: s.now, sched: s, grace: s.cfg.UnhandledKindGrace}
}

// runtime returns the running runtime of the Admin's Scheduler, or nil.
func (a *Admin) runtime() *runtime {
	if a.sched == nil {
		return nil
	}
	a.sched.mu.Lock()
	defer a.sched.mu.Unlock()
	if a.sched.phase != phaseRunning {
		return nil
	}
	return a.sched.run
}

// unsupported returns the error of a method whose store interface st
// lacks.
func unsupported(what string, st store.Store, iface string) error {
	return fmt.Errorf("%s: store %T does not implement %s: %w", what, st, iface, errors.ErrUnsupported)
}

// Leader is the maintenance leadership as the store holds it now.
type Leader struct {
	// Node names the leader; empty when nobody holds the leadership (the
	// leader stopped or died and nobody took over yet).
	Node string `json:"node"`
	// Term grows every time the leadership passes to another node (zero
	// when nobody ever held it).
	Term int64 `json:"term"`
	// ExpiresAt is when the leadership lapses unless the leader renews it
	// (store clock); zero when nobody holds it.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Leader returns who holds the maintenance leadership now, read from the
// store (store.LeaderReader), so it needs no running Scheduler. On a store
// without LeaderReader, the Admin of a running Scheduler answers with
// what that Scheduler last learned; others return an error wrapping
// errors.ErrUnsupported.
func (a *Admin) Leader(ctx context.Context) (*Leader, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("read leader: %w", err)
	}
	if lr, ok := a.store.(store.LeaderReader); ok {
		l, err := lr.Leader(ctx, leaderName)
		if err != nil {
			return nil, fmt.Errorf("read leader: %w", err)
		}
		if !l.Held {
			return &Leader{Term: l.Term}, nil
		}
		return &Leader{Node: l.Holder, Term: l.Term, ExpiresAt: l.ExpiresAt}, nil
	}
	if r := a.runtime(); r != nil {
		return &Leader{Node: r.cluster.leaderHolder(), Term: r.cluster.term.Load()}, nil
	}
	return nil, unsupported("read leader", a.store, "store.LeaderReader")
}

// Nodes lists the cluster's registered nodes, running, stopped and dead
// (until Config.NodeRetention removes them), oldest first, with the
// maintenance leader marked (see Admin.Leader for where that comes from;
// without it no node is marked). It returns an error wrapping
// errors.ErrUnsupported when the store keeps no node registry
// (store.NodeRegistry).
func (a *Admin) Nodes(ctx context.Context) ([]Node, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	reg, ok := a.store.(store.NodeRegistry)
	if !ok {
		return nil, unsupported("nodes", a.store, "store.NodeRegistry")
	}
	recs, err := reg.ListNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	leader := ""
	switch l, err := a.Leader(ctx); {
	case err == nil:
		leader = l.Node
	case !errors.Is(err, errors.ErrUnsupported):
		return nil, fmt.Errorf("nodes: %w", err)
	}
	out := make([]Node, len(recs))
	for i, n := range recs {
		out[i] = Node{
			Name: n.Name, Version: n.Version, Kinds: n.Kinds, KeyIDs: n.KeyIDs, State: n.State,
			Leader:    leader != "" && n.Name == leader && n.State == NodeRunning,
			StartedAt: n.StartedAt, HeartbeatAt: n.HeartbeatAt, ExpiresAt: n.ExpiresAt,
		}
	}
	return out, nil
}

// Stats returns the cluster's queue: the store's job counts by kind and
// state (store.Counter) and, per kind, the run time of the oldest due job
// no host has started (store.DueInspector). The fields about a host
// (Node, Workers, Running, DroppedEvents) are left empty; Scheduler.Stats
// fills them.
func (a *Admin) Stats(ctx context.Context) (*Stats, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st := &Stats{At: a.now()}
	if err := queueStats(ctx, a.store, st, a.grace); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// audit logs a change an operator made.
func (a *Admin) audit(msg string, fields ...zap.Field) {
	a.log.Info(msg, fields...)
}

// FollowUps returns the jobs job id's ends inserted — its follow-ups
// (completion callbacks among them), its Then jobs, a batch completion it
// set off — oldest first. It returns an error wrapping
// errors.ErrUnsupported when the store keeps no follow-ups.
func (a *Admin) FollowUps(ctx context.Context, id uuid.UUID) ([]*JobRecord, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("follow-ups of job %s: %w", id, err)
	}
	fs, ok := a.store.(store.FollowUpStore)
	if !ok {
		return nil, unsupported(fmt.Sprintf("follow-ups of job %s", id), a.store, "store.FollowUpStore")
	}
	recs, err := fs.FollowUps(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("follow-ups of job %s: %w", id, err)
	}
	a.openRecords(recs...) // reencrypt.go
	return recs, nil
}
