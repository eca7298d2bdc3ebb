package ax

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// Kinds no host handles. Scheduling a kind that no host handles is allowed
// (the host that handles it may start later), and such a job waits,
// scheduled, until one does: for a misspelt kind, or hosts deployed
// without its handler, forever. Two things make that visible.
//
// Detection. A kind is unhandled when its jobs have been due for
// Config.UnhandledKindGrace (default 5 minutes) and no running node lists
// it, none that listed it left within the grace (a rolling deploy), and
// the cluster's oldest running node is older than the grace (a cluster
// that is starting): store.UnhandledKinds, from the node registry and the
// oldest due jobs, so every process on the store agrees. The maintenance
// leader checks every UnhandledKindGrace/10 (30s by default; LeaderTTL/3
// when that is longer) and logs one warning per unhandled kind (repeated hourly while it
// lasts; an info line when it ends), emitting EventKindUnhandled each
// time. Admin.Kinds (KindState.Unhandled), Stats (Unhandled), the
// dashboard's Kinds page, axprom's ax_kind_unhandled gauge and
// `ax kinds list` (status "unhandled") mark it.
//
// Refusal. With Config.RefuseUnknownKinds, Schedule, ScheduleMany,
// ScheduleTx, batches, follow-ups and Then refuse a kind this host does
// not handle and no node in the registry lists (running, or stopped or
// dead and not yet removed after Config.NodeRetention), with
// ErrUnknownKind (Then makes no store call: a kind its copy cannot answer
// for is refused with the outcome, by CompleteTx or as the attempt's
// error). The kinds are read with the
// node heartbeat, so a Schedule of a known kind costs no store call; a
// kind not found is read again at most once per LeaderTTL/3 before it is
// refused, so a host that just started is found. Periodic schedules are
// not refused: they are declared in code at Start, and a misspelt one is
// reported as unhandled.

// ErrUnknownKind is returned, with Config.RefuseUnknownKinds, for a job
// kind this host does not handle and no node of the cluster lists: a
// misspelt kind, or one whose hosts are not deployed yet. Nothing was
// stored.
var ErrUnknownKind = errors.New("ax: job kind unknown to the cluster")

// unhandledRewarn is how often the leader repeats its warning about a kind
// that stays unhandled.
const unhandledRewarn = time.Hour

// clusterKinds is a host's copy of the kinds listed by the node registry,
// for Config.RefuseUnknownKinds: replaced by the cluster goroutine's node
// heartbeat and, for a kind not found in a copy older than every, by the
// Schedule call that looks it up. Safe for concurrent use.
type clusterKinds struct {
	reg   store.NodeRegistry
	every time.Duration // how long a copy is trusted for a kind it lacks
	now   func() time.Time

	set    atomic.Pointer[kindSet] // nil until the first read
	readMu sync.Mutex              // one read from Schedule at a time
}

// kindSet is one read of the registry's kinds, at the host time at.
type kindSet struct {
	kinds map[string]bool
	at    time.Time
}

func newClusterKinds(cfg *Config) *clusterKinds {
	reg, _ := cfg.Store.(store.NodeRegistry)
	if !cfg.RefuseUnknownKinds || reg == nil {
		return nil
	}
	return &clusterKinds{reg: reg, every: cfg.LeaderTTL / 3, now: cfg.Clock}
}

// replace installs the kinds that nodes list, as read at now.
func (k *clusterKinds) replace(nodes []*store.NodeRecord, now time.Time) {
	set := &kindSet{kinds: make(map[string]bool), at: now}
	for _, n := range nodes {
		for _, kind := range n.Kinds {
			set.kinds[kind] = true
		}
	}
	k.set.Store(set)
}

// fresh reports whether set answers for kind without a read: it lists it,
// or it is younger than every.
func (k *clusterKinds) fresh(set *kindSet, kind string) bool {
	if set == nil {
		return false
	}
	age := k.now().Sub(set.at)
	return set.kinds[kind] || (age >= 0 && age < k.every)
}

// has reports whether a node of the cluster lists kind, reading the
// registry when the copy lacks kind and is older than every.
func (k *clusterKinds) has(ctx context.Context, kind string) (bool, error) {
	if set := k.set.Load(); k.fresh(set, kind) {
		return set.kinds[kind], nil
	}
	k.readMu.Lock()
	defer k.readMu.Unlock()
	if set := k.set.Load(); k.fresh(set, kind) {
		return set.kinds[kind], nil // read by another call meanwhile
	}
	nodes, err := k.reg.ListNodes(ctx)
	if err != nil {
		return false, fmt.Errorf("read the cluster's kinds: %w", err)
	}
	k.replace(nodes, k.now())
	return k.set.Load().kinds[kind], nil
}

// cached reports whether a node lists kind as far as the copy answers
// without a read: answered is false where has would read the registry.
func (k *clusterKinds) cached(kind string) (listed, answered bool) {
	set := k.set.Load()
	if !k.fresh(set, kind) {
		return false, false
	}
	return set.kinds[kind], true
}

// refuseUnknownKinds returns an error matching ErrUnknownKind for the
// first kind of params or their follow-ups that this host does not handle
// and no node lists, with Config.RefuseUnknownKinds; nil otherwise.
func (s *Scheduler) refuseUnknownKinds(ctx context.Context, params []store.InsertParams) error {
	if s.known == nil {
		return nil
	}
	for i := range params {
		if err := s.checkKnownKind(ctx, params[i].Kind); err != nil {
			return err
		}
		for j := range params[i].FollowUps {
			if err := s.checkKnownKind(ctx, params[i].FollowUps[j].Job.Kind); err != nil {
				return fmt.Errorf("follow-up: %w", err)
			}
		}
	}
	return nil
}

func (s *Scheduler) checkKnownKind(ctx context.Context, kind string) error {
	if s.handler(kind) != nil {
		return nil
	}
	ok, err := s.known.has(ctx, kind)
	if err != nil {
		return err
	}
	if !ok {
		return unknownKind(kind)
	}
	return nil
}

func unknownKind(kind string) error {
	return fmt.Errorf("%w: %q: this host does not handle it and no node of the cluster does (Config.RefuseUnknownKinds)", ErrUnknownKind, kind)
}

// refuseListedUnknownKinds is refuseUnknownKinds without a store call,
// for Then: it refuses the kinds that this host's copy of the cluster's
// kinds answers for, and leaves the others to refuseUnknownKinds with the
// outcome.
func (s *Scheduler) refuseListedUnknownKinds(params []store.InsertParams) error {
	if s.known == nil {
		return nil
	}
	check := func(kind string) error {
		if s.handler(kind) != nil {
			return nil
		}
		if listed, answered := s.known.cached(kind); answered && !listed {
			return unknownKind(kind)
		}
		return nil
	}
	for i := range params {
		if err := check(params[i].Kind); err != nil {
			return err
		}
		for j := range params[i].FollowUps {
			if err := check(params[i].FollowUps[j].Job.Kind); err != nil {
				return fmt.Errorf("follow-up: %w", err)
			}
		}
	}
	return nil
}

// unhandledWatch is the leader's memory of the unhandled kinds it warned
// about. Only the cluster goroutine uses it.
type unhandledWatch struct {
	due       store.DueInspector // nil: the store cannot tell
	every     time.Duration      // between checks
	checkedAt time.Time          // host clock
	warned    map[string]time.Time
}

// watchKinds runs after each cluster tick: it refreshes this host's copy
// of the cluster's kinds (Config.RefuseUnknownKinds) and, on the leader
// every watch.every, looks for unhandled kinds, in one ListNodes call
// shared by both.
func (c *cluster) watchKinds() {
	r, w := c.r, &c.watch
	known := r.s.known
	lead := c.isLeader() && c.registry != nil && w.due != nil
	if !lead {
		w.warned = nil // a later leadership warns afresh
	}
	now := r.s.now()
	check := lead && (w.checkedAt.IsZero() || now.Sub(w.checkedAt) >= w.every || now.Before(w.checkedAt))
	if known == nil && !check {
		return
	}
	ctx, cancel := c.callCtx()
	defer cancel()
	nodes, err := c.registry.ListNodes(ctx)
	if err != nil {
		if r.life.Err() == nil {
			r.log.Warn("list nodes for their kinds failed", zap.Error(err))
		}
		return
	}
	if known != nil {
		known.replace(nodes, now)
	}
	if !check {
		return
	}
	w.checkedAt = now
	rep, err := w.due.OldestDue(ctx)
	if err != nil {
		if r.life.Err() == nil {
			r.log.Warn("read the oldest due jobs for unhandled kinds failed", zap.Error(err))
		}
		return
	}
	w.report(r, store.UnhandledKinds(nodes, rep, r.cfg.UnhandledKindGrace), rep.Now, now)
}

// report warns about the unhandled kinds not warned about within
// unhandledRewarn, and notes those no longer unhandled.
func (w *unhandledWatch) report(r *runtime, kinds []store.KindDue, storeNow, now time.Time) {
	if w.warned == nil {
		w.warned = make(map[string]time.Time)
	}
	seen := make(map[string]bool, len(kinds))
	for _, k := range kinds {
		seen[k.Kind] = true
		if at, ok := w.warned[k.Kind]; ok && now.Sub(at) < unhandledRewarn && !now.Before(at) {
			continue
		}
		w.warned[k.Kind] = now
		waited := storeNow.Sub(k.OldestRunAt)
		r.log.Warn("no running node handles this kind: its jobs wait until a host that handles it runs (a misspelt kind, or hosts deployed without its handler?)",
			zap.String(fieldKind, k.Kind), zap.Float64("waited_ms", ms(waited)), zap.Time("oldest_run_at", k.OldestRunAt),
			zap.Float64("grace_ms", ms(r.cfg.UnhandledKindGrace)))
		r.s.emit(Event{Kind: EventKindUnhandled, JobKind: k.Kind, Delay: waited,
			Reason: "jobs due for longer than UnhandledKindGrace and no running node handles the kind"})
	}
	for kind := range w.warned {
		if !seen[kind] {
			delete(w.warned, kind)
			r.log.Info("kind no longer unhandled: a node handles it, or none of its jobs is due", zap.String(fieldKind, kind))
		}
	}
}
