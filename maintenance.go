package ax

import (
	"context"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// Maintenance batch bounds: each statement touches at most maintenanceBatch
// rows, and one pass makes at most maintenanceRounds of them, so a huge
// backlog is worked off over several passes instead of one long one.
const (
	maintenanceBatch  = 1000
	maintenanceRounds = 10
	pruneInterval     = time.Minute
)

// maintain runs, on the maintenance leader only (see leader.go), the
// rescuer (expired leases back to retrying or dead) every RescueInterval,
// and at once when this host becomes leader, and the pruner (final jobs past
// Retention) every minute. Followers skip their ticks. Both are idempotent
// guarded statements, so a moment of split leadership is harmless.
func (r *runtime) maintain() {
	defer close(r.maintDone)
	rescue := time.NewTicker(r.cfg.RescueInterval)
	defer rescue.Stop()
	prune := time.NewTicker(pruneInterval)
	defer prune.Stop()
	pruner, canPrune := r.store.(store.Pruner)
	for {
		select {
		case <-r.maintStop:
			return
		case <-r.cluster.elected:
			r.rescue()
		case <-rescue.C:
			if r.cluster.isLeader() {
				r.rescue()
			}
		case <-prune.C:
			if canPrune && r.cluster.isLeader() {
				r.prune(pruner)
			}
		}
	}
}

func (r *runtime) rescue() {
	total := 0
	for range maintenanceRounds {
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		n, err := r.store.RescueExpired(ctx, maintenanceBatch)
		cancel()
		if err != nil {
			r.log.Warn("rescue expired leases failed", zap.Error(err))
			break
		}
		total += n
		if n < maintenanceBatch {
			break
		}
	}
	if total > 0 {
		r.log.Warn("rescued jobs whose leases expired (their hosts died or stalled)", zap.Int("jobs", total))
		r.wake()
	}
}

func (r *runtime) prune(p store.Pruner) {
	total := 0
	for range maintenanceRounds {
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		n, err := p.Prune(ctx, &store.PruneParams{Retention: r.cfg.Retention, Limit: maintenanceBatch})
		cancel()
		if err != nil {
			r.log.Warn("prune finished jobs failed", zap.Error(err))
			break
		}
		total += n
		if n < maintenanceBatch {
			break
		}
	}
	if total > 0 {
		r.log.Info("pruned finished jobs", zap.Int("jobs", total), zap.Duration("retention", r.cfg.Retention))
	}
}
