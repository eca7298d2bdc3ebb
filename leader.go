package ax

import (
	"context"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// leaderName names the maintenance leadership lease in the store.
const leaderName = "ax.maintenance"

// Leadership. One host of the cluster is the leader and runs the
// maintenance that should run once and can wait: the pruner (finished jobs
// past Retention) and marking dead nodes. (The rescuer runs on every host:
// failover must not wait for a new leader when the leader is the host that
// died; see maintain.) The lease is a row in the store (store.Leaser) with a
// TTL compared in the store's clock; its term grows with every change of
// holder and is logged with each transition. Each host runs this state
// machine on its cluster goroutine, every LeaderTTL/3:
//
//	                   AcquireLeader → Held (term n), or no Leaser in the store
//	  ┌──────────┐ ───────────────────────────────────────────▶ ┌────────────────┐
//	  │ follower │                                               │ leader, term n │ ◀─┐ AcquireLeader → Held:
//	  └──────────┘ ◀─────────────────────────────────────────── └────────────────┘ ──┘ renewed, until = t0 + TTL
//	   │       ▲     AcquireLeader → not Held (another holder);
//	   └───────┘     or until passed with no successful renewal
//	 AcquireLeader    (store unreachable, host paused);
//	 → not Held       or Stop: ReleaseLeader, then follower for good
//	 (try again next tick)
//
// "until" is the host time t0 read just before the renewing call plus
// LeaderTTL. The store stamped its expiry from its own now, which is after
// t0, so a host stops acting as leader no later than the store lets another
// host take over: two hosts never believe themselves leader at once, up to
// clock rate drift. Split brain would be harmless anyway: the pruner and
// the node reaper are idempotent guarded statements.
//
// A graceful Stop releases the lease (the row expires at once, term kept),
// so a follower takes over at its next try, within LeaderTTL/3. A leader
// that dies is replaced within LeaderTTL + LeaderTTL/3.

// isLeader reports whether this host is the maintenance leader now.
func (c *cluster) isLeader() bool {
	return c.leading.Load() && c.r.s.now().UnixNano() < c.leaderUntil.Load()
}

// elect takes or renews the leadership, or notices its loss.
func (c *cluster) elect() {
	if c.leaser == nil {
		return
	}
	r := c.r
	before := r.s.now()
	// Until the leadership held lapses, or the one taken would: a store
	// slower than the tick interval still renews or grants it
	// (keepAliveTimeout).
	lapse := before.Add(r.cfg.LeaderTTL)
	if c.leading.Load() {
		lapse = time.Unix(0, c.leaderUntil.Load())
	}
	ctx, cancel := context.WithTimeout(r.life, keepAliveTimeout(c.interval, before, lapse))
	defer cancel()
	l, err := c.leaser.AcquireLeader(ctx, &store.LeaderParams{Name: leaderName, Holder: r.cfg.Node, TTL: r.cfg.LeaderTTL})
	if err != nil {
		if r.life.Err() == nil {
			r.log.Warn("leader election failed", zap.Error(err))
		}
		if c.leading.Load() && r.s.now().UnixNano() >= c.leaderUntil.Load() {
			c.step(false, c.term.Load(), "leadership lease lapsed: it could not be renewed")
		}
		return
	}
	holder := l.Holder
	c.holder.Store(&holder)
	switch {
	case l.Held:
		c.leaderUntil.Store(before.Add(r.cfg.LeaderTTL).UnixNano())
		if !c.leading.Load() {
			c.step(true, l.Term, "elected")
		} else if old := c.term.Swap(l.Term); old != l.Term {
			r.log.Warn("leadership lapsed and was taken again in a new term",
				zap.Int64("old_term", old), zap.Int64("term", l.Term))
		}
	case c.leading.Load():
		c.step(false, l.Term, "another node holds the leadership: "+l.Holder)
	}
}

// resign releases the leadership at Stop, so another host takes it over at
// its next try instead of after LeaderTTL.
func (c *cluster) resign(ctx context.Context) {
	if c.leaser == nil || !c.leading.Load() {
		return
	}
	if _, err := c.leaser.ReleaseLeader(ctx, leaderName, c.r.cfg.Node); err != nil {
		c.r.log.Warn("release leadership failed: another host takes over when it expires",
			zap.Error(err), zap.Float64("ttl_ms", ms(c.r.cfg.LeaderTTL)))
	}
	c.holder.Store(nil)
	c.step(false, c.term.Load(), "stopping")
}

// step records a leadership change, logs it and emits EventLeaderChanged.
func (c *cluster) step(leader bool, term int64, why string) {
	c.leading.Store(leader)
	c.term.Store(term)
	c.r.log.Info("maintenance leadership changed", zap.Bool("leader", leader),
		zap.Int64("term", term), zap.String("reason", why))
	c.r.s.emit(Event{Kind: EventLeaderChanged, Leader: leader})
}

// leaderHolder returns the leader's node name as this host last learned it
// from the store, or "" when it does not know.
func (c *cluster) leaderHolder() string {
	if c.leaser == nil {
		return ""
	}
	if h := c.holder.Load(); h != nil {
		return *h
	}
	return ""
}
