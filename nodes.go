package ax

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// NodeState is a node's position in the registry: NodeRunning,
// NodeStopped or NodeDead (see store.NodeState for the transitions).
type NodeState = store.NodeState

// Node states, as listed by Scheduler.Nodes.
const (
	// NodeRunning: the node heartbeats.
	NodeRunning = store.NodeRunning
	// NodeStopped: the node's Scheduler stopped gracefully.
	NodeStopped = store.NodeStopped
	// NodeDead: the node stopped heartbeating for Config.NodeTimeout
	// without stopping; the leader marked it dead. Its running jobs come
	// back when their leases expire.
	NodeDead = store.NodeDead
)

// Node is one host of the cluster, as registered in the store. Every
// started Scheduler registers its node and heartbeats it every
// Config.LeaderTTL/3; jobs it runs carry its name as their Owner.
type Node struct {
	// Name is the node's Config.Node.
	Name string `json:"name"`
	// Version is the node's Config.Version.
	Version string `json:"version"`
	// Kinds are the job kinds the node handles, sorted.
	Kinds []string `json:"kinds"`
	// KeyIDs are the IDs of the encryption keys the node holds
	// (Config.Keys), its current key first: the one it seals with. A key
	// rotation makes a new key current only once every running node lists
	// it (docs/operations.md).
	KeyIDs []string `json:"key_ids,omitempty"`
	// State is running, stopped or dead.
	State NodeState `json:"state"`
	// Leader reports whether the node holds the maintenance leadership:
	// as the store reports it now when it implements store.LeaderReader
	// (memstore does), otherwise as the calling Scheduler last learned it
	// (at most LeaderTTL/3 ago; always false when it is not running).
	Leader bool `json:"leader"`
	// StartedAt is when the node first registered (store clock).
	StartedAt time.Time `json:"started_at"`
	// HeartbeatAt is the node's latest heartbeat (store clock).
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// ExpiresAt is when a running node without a further heartbeat counts
	// as dead; for stopped and dead nodes, when they stopped or lapsed.
	ExpiresAt time.Time `json:"expires_at"`
}

// Nodes lists the cluster's registered nodes, running, stopped and dead
// (until Config.NodeRetention removes them), oldest first; see
// Admin.Nodes, which a process that runs no Scheduler can call. It works
// before Start too. It returns an error wrapping errors.ErrUnsupported
// when the store keeps no node registry (store.NodeRegistry), and
// ErrSchedulerClosed once Stop has begun.
func (s *Scheduler) Nodes(ctx context.Context) ([]Node, error) {
	if s.closed() {
		return nil, fmt.Errorf("nodes: %w", ErrSchedulerClosed)
	}
	return s.admin.Nodes(ctx)
}

// heartbeatNode registers this node or records its heartbeat, with the
// kinds handled now, within ctx: the runtime's life on the cluster
// goroutine, Start's own context (ended with the runtime's life) from
// Start.
func (c *cluster) heartbeatNode(ctx context.Context) {
	if c.registry == nil {
		return
	}
	r := c.r
	kinds := r.s.kinds()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.kind
	}
	// Until the row lapses, or the one written would: a store slower
	// than the tick still keeps the node alive (keepAliveTimeout), where
	// the leader would otherwise mark it dead and its kinds unhandled.
	before := r.s.now()
	lapse := time.Unix(0, c.nodeUntil.Load())
	if !lapse.After(before) {
		lapse = before.Add(r.cfg.NodeTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, keepAliveTimeout(c.interval, before, lapse))
	defer cancel()
	err := c.registry.HeartbeatNode(ctx, &store.NodeParams{
		Name: r.cfg.Node, Version: r.cfg.Version, Kinds: names, KeyIDs: keyIDs(r.cfg.Keys), TTL: r.cfg.NodeTimeout,
	})
	if err != nil {
		if r.life.Err() == nil {
			r.log.Warn("node heartbeat failed", zap.Error(err))
		}
		return
	}
	c.nodeUntil.Store(before.Add(r.cfg.NodeTimeout).UnixNano())
}

// stopNode marks this node stopped at Stop.
func (c *cluster) stopNode(ctx context.Context) {
	if c.registry == nil {
		return
	}
	if _, err := c.registry.StopNode(ctx, c.r.cfg.Node); err != nil {
		c.r.log.Warn("mark node stopped failed: the leader will mark it dead", zap.Error(err))
	}
}

// reapNodes, on the leader, marks lapsed nodes dead and removes old
// stopped and dead ones.
func (c *cluster) reapNodes() {
	if c.registry == nil {
		return
	}
	r := c.r
	ctx, cancel := c.callCtx()
	defer cancel()
	dead, removed, err := c.registry.ReapNodes(ctx, &store.ReapParams{Retention: r.cfg.NodeRetention})
	switch {
	case err != nil:
		if r.life.Err() == nil {
			r.log.Warn("reap nodes failed", zap.Error(err))
		}
	case len(dead) > 0:
		r.log.Warn("nodes stopped heartbeating: marked dead (their jobs come back when their leases expire)",
			zap.Strings("nodes", dead), zap.Float64("node_timeout_ms", ms(r.cfg.NodeTimeout)))
	}
	if len(removed) > 0 {
		r.log.Info("removed old stopped and dead nodes", zap.Strings("nodes", removed))
	}
}

// defaultVersion is "<main module path> <version>" from the binary's build
// information, or "unknown".
func defaultVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Path == "" {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		if i := slices.IndexFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "vcs.revision" }); i >= 0 {
			v = bi.Settings[i].Value
		}
	}
	return bi.Main.Path + " " + v
}
