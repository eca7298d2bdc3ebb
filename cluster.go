package ax

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
)

// cluster is this host's membership in the cluster: one goroutine that, every
// LeaderTTL/3, heartbeats the node row (nodes.go), takes or renews the
// maintenance leadership (leader.go) and, on the leader, reaps dead nodes.
// Stores without store.Leaser make every host its own leader; stores
// without store.NodeRegistry keep no node rows.
type cluster struct {
	r        *runtime
	leaser   store.Leaser       // nil when the store cannot elect
	registry store.NodeRegistry // nil when the store keeps no nodes
	interval time.Duration      // LeaderTTL / 3

	quit chan struct{}
	done chan struct{}

	// Leadership as this host knows it. leading and term are written only
	// by the cluster goroutine (and by stop, after it ended); leaderUntil
	// is the host time (UnixNano) at which the leadership lapses unless
	// renewed; holder is the last holder the store named.
	leading     atomic.Bool
	term        atomic.Int64
	leaderUntil atomic.Int64
	holder      atomic.Pointer[string]
	// nodeUntil is the host time (UnixNano) at which this node's row
	// lapses unless heartbeated again, zero before the first heartbeat.
	// Atomic: Start heartbeats the node too, beside the cluster
	// goroutine's first round.
	nodeUntil atomic.Int64

	// watch finds kinds no node handles (unhandled.go).
	watch unhandledWatch
	// keys finds keys some nodes seal with and others lack (keycheck.go).
	keys keyWatch
}

func newCluster(r *runtime) *cluster {
	c := &cluster{
		r:        r,
		interval: r.cfg.LeaderTTL / 3,
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.leaser, _ = r.store.(store.Leaser)
	c.registry, _ = r.store.(store.NodeRegistry)
	c.watch.due, _ = r.store.(store.DueInspector)
	c.watch.every = max(c.interval, r.cfg.UnhandledKindGrace/10)
	if c.leaser == nil {
		c.leading.Store(true)
		c.leaderUntil.Store(int64(^uint64(0) >> 1))
	}
	return c
}

// startCluster starts node registration and leader election: the first
// heartbeat and election attempt happen at once, on the cluster goroutine.
func (r *runtime) startCluster() {
	go r.cluster.run()
}

// stopCluster stops the cluster goroutine, releases the leadership (so
// another host takes it within LeaderTTL/3, not LeaderTTL) and marks the
// node stopped, giving up when grace ends (Stop's grace deadline) or after
// ReleaseTimeout. It runs after maintenance has stopped.
func (r *runtime) stopCluster(grace context.Context) {
	c := r.cluster
	close(c.quit)
	<-c.done
	ctx, cancel := context.WithTimeout(grace, r.cfg.ReleaseTimeout)
	defer cancel()
	c.resign(ctx)
	c.stopNode(ctx)
}

func (c *cluster) run() {
	defer close(c.done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.tick()
		select {
		case <-c.quit:
			return
		case <-t.C:
		}
	}
}

// tick is one round of membership: node heartbeat, election, the
// leader's node reaping, and the watch on the cluster's kinds.
func (c *cluster) tick() {
	c.heartbeatNode(c.r.life)
	c.elect()
	if c.isLeader() {
		c.reapNodes()
	}
	c.watchKinds()
	c.checkKeys()
}

// callCtx bounds one store call of the cluster goroutine by the tick
// interval, so a hung store never delays the next tick by more than that,
// and ends it when Stop begins.
func (c *cluster) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.r.life, c.interval)
}
