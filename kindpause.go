package ax

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// Pausing a kind. An operator pauses a kind cluster-wide
// (Admin.PauseKind); the store keeps the paused set (store.KindPauser).
// Every running Scheduler reads the set at Start, then every
// HeartbeatInterval and whenever the store notifies a pause or a resume
// (an empty-kind notification), and leaves paused kinds out of its
// claims: a host that hears the pause stops starting the kind as soon as
// it has re-read the set (a few milliseconds), and no attempt of a paused
// kind starts later than one HeartbeatInterval after the pause on a host
// that missed the notification (at once on the host that paused it; with
// a store slower than that, once its read lands). Attempts already
// running finish; nothing is cancelled and nothing is lost. On the host
// whose own Admin paused the kind, the pause holds from the moment the
// call returns: a claim or a direct start in flight at the call, and a
// job claimed ahead of its run time and waiting for it, hand the kind's
// jobs back to the store unstarted (scheduled, due at once, the attempt
// not counted) instead of starting them. A resume
// makes the store send an empty-kind notification: each host re-reads
// the set and claims at once, without waiting for its next read.
//
//	PauseKind ──▶ store: paused, empty-kind notification ──▶ every host: re-read, no claims of the kind
//	                  (a host that missed it: at its next read, ≤ HeartbeatInterval)
//	ResumeKind ─▶ store: resumed, empty-kind notification ──▶ every host: re-read, claim now
//
// A host that cannot read the set keeps the one it last read.

// KindState is the operator's view of one job kind.
type KindState struct {
	// Kind names the kind.
	Kind string `json:"kind"`
	// Paused reports that no host claims the kind's jobs.
	Paused bool `json:"paused"`
	// UpdatedAt is when the kind was paused (store clock); zero for a
	// kind that is not paused (the store keeps only pauses). From
	// ResumeKind: when it was resumed, or zero when it was not paused.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Jobs counts the kind's jobs by state (from Admin.Kinds, when the
	// store counts jobs); states without jobs are absent.
	Jobs map[State]int64 `json:"jobs,omitempty"`
	// Nodes names the running nodes that handle the kind (from
	// Admin.Kinds, when the store keeps a node registry), sorted.
	Nodes []string `json:"nodes,omitempty"`
	// Flow is the kind's flow settings and state (from Admin.Kinds, when
	// the store has flow control and the kind has settings).
	Flow *FlowState `json:"flow,omitempty"`
	// OldestDue is the run time of the kind's oldest due job that no
	// host has started (store clock; from Admin.Kinds, when the store
	// implements store.DueInspector); zero when none is due.
	OldestDue time.Time `json:"oldest_due,omitzero"`
	// Unhandled reports that the kind's jobs have been due for the
	// UnhandledKindGrace with no running node handling it (from
	// Admin.Kinds; see store.UnhandledKinds): they wait until a host
	// that handles the kind runs. A misspelt kind, or hosts deployed
	// without its handler. Always false when the store keeps no node
	// registry or cannot tell its oldest due jobs (store.NodeRegistry,
	// store.DueInspector).
	Unhandled bool `json:"unhandled"`
}

// PauseKind pauses kind across the cluster: the store notifies every
// host, which re-reads the paused kinds at once and stops starting the
// kind's jobs, and no host starts a new attempt of it later than one
// HeartbeatInterval after the call, notification heard or not (from the
// call on for this host, when the Admin is a running Scheduler's: a claim
// or direct start in flight at the call hands the kind's jobs back
// unstarted); attempts already running finish. Jobs of the kind keep their state and wait;
// jobs scheduled meanwhile wait too. The pause is stored, so it outlives
// restarts and applies to hosts started later. A kind needs no jobs or
// handler to be paused. Pausing a paused kind changes nothing. It
// returns the kind's state afterwards.
//
// Errors: ErrInvalidKind, errors.ErrUnsupported (the store does not
// implement store.KindPauser), or the store's error, wrapped.
func (a *Admin) PauseKind(ctx context.Context, kind string) (*KindState, error) {
	return a.setKindPaused(ctx, kind, true)
}

// ResumeKind resumes a paused kind: every host claims its due jobs at
// once (the store notifies them). Resuming a kind that is not paused
// changes nothing. Errors are as for PauseKind.
func (a *Admin) ResumeKind(ctx context.Context, kind string) (*KindState, error) {
	return a.setKindPaused(ctx, kind, false)
}

func (a *Admin) setKindPaused(ctx context.Context, kind string, paused bool) (*KindState, error) {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("%s kind: %w", verb, err)
	}
	if err := checkKind(kind); err != nil {
		return nil, fmt.Errorf("%s kind: %w", verb, err)
	}
	kp, ok := a.store.(store.KindPauser)
	if !ok {
		return nil, unsupported(verb+" kind", a.store, "store.KindPauser")
	}
	ks, err := kp.SetKindPaused(ctx, kind, paused)
	if err != nil {
		return nil, fmt.Errorf("%s kind %q: %w", verb, kind, err)
	}
	a.audit("kind "+verb+"d", zap.String(fieldKind, kind))
	if r := a.runtime(); r != nil {
		r.pauses.apply(kind, ks.Paused)
		if !ks.Paused {
			r.wake()
		}
	}
	return &KindState{Kind: ks.Kind, Paused: ks.Paused, UpdatedAt: ks.UpdatedAt}, nil
}

// Kinds lists the kinds the cluster knows, sorted: those with jobs, those
// a running node handles, those paused, and those with
// flow settings, each with its pause state, job counts by state, handling
// nodes, flow state, oldest due job and whether it is unhandled (no
// running node handles it while its jobs are due: KindState.Unhandled),
// as far as the store tells them (store.KindPauser, store.Counter,
// store.NodeRegistry, store.FlowStore, store.DueInspector). It returns an
// error wrapping errors.ErrUnsupported only when the store tells none of
// them.
func (a *Admin) Kinds(ctx context.Context) ([]KindState, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("kinds: %w", err)
	}
	kinds := make(map[string]*KindState)
	kind := func(name string) *KindState {
		k := kinds[name]
		if k == nil {
			k = &KindState{Kind: name}
			kinds[name] = k
		}
		return k
	}
	known := false
	if kp, ok := a.store.(store.KindPauser); ok {
		known = true
		states, err := kp.KindStates(ctx)
		if err != nil {
			return nil, fmt.Errorf("kinds: %w", err)
		}
		for _, ks := range states {
			k := kind(ks.Kind)
			k.Paused, k.UpdatedAt = ks.Paused, ks.UpdatedAt
		}
	}
	if c, ok := a.store.(store.Counter); ok {
		known = true
		counts, err := c.CountJobs(ctx)
		if err != nil {
			return nil, fmt.Errorf("kinds: count jobs: %w", err)
		}
		for _, sc := range counts {
			k := kind(sc.Kind)
			if k.Jobs == nil {
				k.Jobs = make(map[State]int64)
			}
			k.Jobs[sc.State] += sc.Count
		}
	}
	var nodes []*store.NodeRecord
	reg, listed := a.store.(store.NodeRegistry)
	if listed {
		known = true
		var err error
		nodes, err = reg.ListNodes(ctx)
		if err != nil {
			return nil, fmt.Errorf("kinds: nodes: %w", err)
		}
		for _, n := range nodes {
			if n.State != store.NodeRunning {
				continue
			}
			for _, name := range n.Kinds {
				k := kind(name)
				k.Nodes = append(k.Nodes, n.Name)
			}
		}
	}
	if fs, ok := a.store.(store.FlowStore); ok {
		known = true
		flows, err := fs.Flows(ctx)
		if err != nil {
			return nil, fmt.Errorf("kinds: flows: %w", err)
		}
		for i := range flows {
			kind(flows[i].Config.Kind).Flow = &flows[i]
		}
	}
	if di, ok := a.store.(store.DueInspector); ok {
		known = true
		rep, err := di.OldestDue(ctx)
		if err != nil {
			return nil, fmt.Errorf("kinds: oldest due jobs: %w", err)
		}
		for _, k := range rep.Kinds {
			kind(k.Kind).OldestDue = k.OldestRunAt
		}
		if listed {
			for _, k := range store.UnhandledKinds(nodes, rep, a.grace) { // unhandled.go
				kind(k.Kind).Unhandled = true
			}
		}
	}
	if !known {
		return nil, unsupported("kinds", a.store, "store.KindPauser, store.Counter, store.NodeRegistry, store.FlowStore or store.DueInspector")
	}
	out := make([]KindState, 0, len(kinds))
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		k := kinds[name]
		slices.Sort(k.Nodes)
		out = append(out, *k)
	}
	return out, nil
}

// kindPauses is a running Scheduler's copy of the cluster's paused kinds:
// read at Start, re-read every HeartbeatInterval and on an empty-kind
// notification (which a resume sends), and read by every claim round.
type kindPauses struct {
	r      *runtime
	kp     store.KindPauser // nil: the store pauses no kinds
	set    atomic.Pointer[map[string]bool]
	reread chan struct{} // capacity 1: re-read now, then wake the claimer
	done   chan struct{}

	// mu orders local changes (apply) with reads from the store
	// (replace): a read that began before a local change must not undo
	// it, so each local change is kept, and wins, until a read that began
	// after it.
	mu    sync.Mutex
	seq   uint64                 // counts local changes
	local map[string]localChange // local changes not yet seen by a read
}

// localChange is a pause or resume made on this host.
type localChange struct {
	paused bool
	seq    uint64
}

func newKindPauses(r *runtime) *kindPauses {
	p := &kindPauses{r: r, reread: make(chan struct{}, 1), done: make(chan struct{}), local: make(map[string]localChange)}
	p.kp, _ = r.store.(store.KindPauser)
	p.set.Store(&map[string]bool{})
	return p
}

// pausedKinds reads the paused kinds from st; nil when st pauses none.
func pausedKinds(ctx context.Context, st store.Store) (map[string]bool, error) {
	kp, ok := st.(store.KindPauser)
	if !ok {
		return nil, nil
	}
	states, err := kp.KindStates(ctx)
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool)
	for _, ks := range states {
		if ks.Paused {
			set[ks.Kind] = true
		}
	}
	return set, nil
}

// paused reports whether kind is paused, as this host last read it.
func (p *kindPauses) paused(kind string) bool { return (*p.set.Load())[kind] }

// since returns the mark a read taken now passes to replace.
func (p *kindPauses) since() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// replace installs a set read from the store by a read that began at mark
// since, keeping the local changes made after that, and logs the changes.
func (p *kindPauses) replace(set map[string]bool, since uint64) {
	p.mu.Lock()
	for kind, lc := range p.local {
		switch {
		case lc.seq <= since:
			delete(p.local, kind) // the read saw it
		case lc.paused:
			set[kind] = true
		default:
			delete(set, kind)
		}
	}
	old := p.set.Swap(&set)
	p.mu.Unlock()
	for k := range set {
		if !(*old)[k] {
			p.r.log.Info("kind paused: its jobs are not claimed", zap.String(fieldKind, k))
		}
	}
	for k := range *old {
		if !set[k] {
			p.r.log.Info("kind resumed", zap.String(fieldKind, k))
		}
	}
}

// apply records a pause or resume made on this host, before the next
// read would.
func (p *kindPauses) apply(kind string, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	p.local[kind] = localChange{paused: paused, seq: p.seq}
	next := maps.Clone(*p.set.Load())
	if paused {
		next[kind] = true
	} else {
		delete(next, kind)
	}
	p.set.Store(&next)
}

// requestReread asks the loop to re-read the set and then wake the
// claimer; without a KindPauser it wakes the claimer at once. It never
// blocks (it runs in store notification callbacks).
func (p *kindPauses) requestReread() {
	if p.kp == nil {
		p.r.wake()
		return
	}
	select {
	case p.reread <- struct{}{}:
	default:
	}
}

// run re-reads the set every HeartbeatInterval and when asked, until
// Stop begins.
func (p *kindPauses) run() {
	defer close(p.done)
	if p.kp == nil {
		return
	}
	t := time.NewTicker(p.r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		wake := false
		select {
		case <-p.r.life.Done():
			return
		case <-t.C:
		case <-p.reread:
			wake = true
		}
		p.read()
		if wake {
			// Even when the read failed: the claim must not wait for
			// the poll, and the old set still applies.
			p.r.wake()
		}
	}
}

// read re-reads the set from the store, bounded by LeaseDuration: a
// store slower than HeartbeatInterval still answers it (the next read
// waits for this one). Bounded by the interval, every read failed once
// the store took longer, and a host kept claiming a kind an operator had
// paused, at the time a pause is most wanted: a database under load
// (TestPausedKindsReadThroughASlowStore; keepalive.go has the same fix
// for the calls that keep leases and leadership).
func (p *kindPauses) read() {
	ctx, cancel := context.WithTimeout(p.r.life, p.r.cfg.LeaseDuration)
	defer cancel()
	since := p.since()
	set, err := pausedKinds(ctx, p.r.store)
	if err != nil {
		if p.r.life.Err() == nil {
			p.r.log.Warn("read paused kinds failed; keeping the last read", zap.Error(err))
		}
		return
	}
	p.replace(set, since)
}

// withoutPaused returns the jobs of a claim whose kinds this host does not
// hold as paused, and hands the others back to the store unstarted. A
// claim leaves paused kinds out when it begins, but one in flight when
// PauseKind is called here (the first claim after Start, say, slow on a
// cold connection) can still take a job of the kind scheduled after the
// pause returned; checking again once it returns keeps the promise that
// the kind is no longer started here from the call on.
func (r *runtime) withoutPaused(jobs []*store.JobRecord) []*store.JobRecord {
	var paused []*store.JobRecord
	kept := jobs
	for i, rec := range jobs {
		if !r.pauses.paused(rec.Kind) {
			if paused != nil {
				kept = append(kept, rec)
			}
			continue
		}
		if paused == nil {
			kept = slices.Clone(jobs[:i])
		}
		paused = append(paused, rec)
	}
	if len(paused) > 0 {
		r.handBackUnstarted(unstartedRecords(paused), "its kind was paused")
	}
	return kept
}

// handBackHeld hands back an attempt claimed ahead of its run time (held
// in holds until then) when its kind was paused here meanwhile, and
// reports whether it did: its handler must not start. The attempt ends
// as one handed back at Stop does: its result, none, is discarded.
func (r *runtime) handBackHeld(a *attempt) bool {
	if !r.pauses.paused(a.job.Kind) {
		return false
	}
	r.mu.Lock()
	if !a.extendable() {
		r.mu.Unlock()
		return false // lost or handed back already: execute ends it
	}
	a.released = true
	r.mu.Unlock()
	r.handBackUnstarted([]unstarted{{lease: a.lease, kind: a.job.Kind}}, "its kind was paused while it waited for its run time")
	r.finish(a, errKindPaused, errKindPaused, 0)
	return true
}

// errKindPaused ends an attempt handed back unstarted because its kind
// was paused (never written: the hand-back discards the result).
var errKindPaused = errors.New("ax: kind paused before the attempt started")
