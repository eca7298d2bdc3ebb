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
	total := r.inBatches("rescue expired leases", func(ctx context.Context) (int, error) {
		rescued, err := r.store.RescueExpired(ctx, maintenanceBatch)
		return len(rescued), err
	})
	if total > 0 {
		r.log.Warn("rescued jobs whose leases expired (their hosts died or stalled)", zap.Int("jobs", total))
		r.wake()
	}
}

func (r *runtime) prune(p store.Pruner) {
	total := r.inBatches("prune finished jobs", func(ctx context.Context) (int, error) {
		return p.Prune(ctx, &store.PruneParams{Retention: r.cfg.Retention, Limit: maintenanceBatch})
	})
	if total > 0 {
		r.log.Info("pruned finished jobs", zap.Int("jobs", total), zap.Duration("retention", r.cfg.Retention))
	}
}

// inBatches runs a bounded maintenance statement until it touches fewer than
// maintenanceBatch rows or maintenanceRounds have run, and returns the rows
// touched. A failure is logged and ends the pass; the next tick retries.
func (r *runtime) inBatches(what string, batch func(ctx context.Context) (int, error)) int {
	total := 0
	for range maintenanceRounds {
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		n, err := batch(ctx)
		cancel()
		if err != nil {
			r.log.Warn(what+" failed", zap.Error(err))
			break
		}
		total += n
		if n < maintenanceBatch {
			break
		}
	}
	return total
}
