package ax

import (
	"context"
	"math/rand/v2"
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
	// archiveInterval is how often each host moves finished jobs to the
	// store's history (store.Archiver), archiveBatch jobs per statement:
	// up to archiveBatch*maintenanceRounds a second per host, more than
	// a host finishes.
	archiveInterval = time.Second
	archiveBatch    = 5000
	// rescueLogIDs bounds the job IDs named in one "rescued" log line.
	rescueLogIDs = 50
)

// maintain runs the rescuer on every host and the pruner on the leader:
//
//   - The rescuer takes back expired leases (to retrying, paused, dead or
//     cancelled). It is one atomic, idempotent store operation that
//     concurrent hosts split between them, so it needs no leader: every
//     host runs it every RescueInterval, jittered by ±20% so hosts do not
//     all run it at once. A dead host's jobs then run elsewhere
//     LeaseDuration + RescueInterval after its last heartbeat, whoever died,
//     the leader included.
//   - The pruner deletes final jobs past Retention every minute, on the
//     maintenance leader only (see leader.go): it can wait, and once is
//     enough.
//   - The archiver, when the store has one (store.Archiver), moves
//     finished jobs to the store's history every second on every host
//     (the store splits the work between them), so that the live table
//     stays small.
//
// Both stop as soon as Stop begins.
func (r *runtime) maintain() {
	defer close(r.maintDone)
	rescue := time.NewTimer(jitter(r.cfg.RescueInterval))
	defer rescue.Stop()
	prune := time.NewTicker(pruneInterval)
	defer prune.Stop()
	pruner, canPrune := r.store.(store.Pruner)
	archiver, canArchive := r.store.(store.Archiver)
	archive := time.NewTimer(jitter(archiveInterval))
	defer archive.Stop()
	if !canArchive {
		archive.Stop()
	}
	for {
		select {
		case <-r.life.Done():
			return
		case <-rescue.C:
			r.rescue()
			rescue.Reset(jitter(r.cfg.RescueInterval))
		case <-prune.C:
			if canPrune && r.cluster.isLeader() {
				r.prune(pruner)
			}
		case <-archive.C:
			r.archive(archiver)
			archive.Reset(jitter(archiveInterval))
		}
	}
}

// jitter returns d ±20%, uniformly.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + time.Duration(rand.Int64N(int64(d*2/5)+1))
}

func (r *runtime) rescue() {
	var rescued []store.Rescued
	r.inBatches("rescue expired leases", func(ctx context.Context) (int, error) {
		batch, err := r.store.RescueExpired(ctx, maintenanceBatch)
		rescued = append(rescued, batch...)
		return len(batch), err
	})
	if len(rescued) == 0 {
		return
	}
	owners := make(map[string]bool)
	ids := make([]string, 0, min(len(rescued), rescueLogIDs))
	for _, j := range rescued {
		r.s.emit(Event{Kind: EventRescued, JobID: j.ID, JobKind: j.Kind, Attempt: j.Attempt, Owner: j.Owner, State: j.State})
		owners[j.Owner] = true
		if len(ids) < rescueLogIDs {
			ids = append(ids, j.ID.String())
		}
		if ce := r.log.Check(zap.DebugLevel, "job rescued: its lease expired"); ce != nil {
			ce.Write(zap.Stringer(fieldJobID, j.ID), zap.String(fieldKind, j.Kind), zap.Int(fieldAttempt, j.Attempt),
				zap.String("owner", j.Owner), zap.String("state", string(j.State)))
		}
	}
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
	}
	r.log.Warn("rescued jobs whose leases expired (their hosts died or stalled)", zap.Int("jobs", len(rescued)),
		zap.Strings("owners", names), zap.Strings("job_ids", ids), zap.Bool("job_ids_truncated", len(rescued) > len(ids)))
	r.wake()
}

func (r *runtime) prune(p store.Pruner) {
	total := r.inBatches("prune finished jobs", func(ctx context.Context) (int, error) {
		return p.Prune(ctx, &store.PruneParams{Retention: r.cfg.Retention, Limit: maintenanceBatch})
	})
	if total > 0 {
		r.log.Info("pruned finished jobs", zap.Int("jobs", total), zap.Float64("retention_ms", ms(r.cfg.Retention)))
	}
}

func (r *runtime) archive(a store.Archiver) {
	r.inBatchesOf(archiveBatch, "archive finished jobs", func(ctx context.Context) (int, error) {
		return a.Archive(ctx, archiveBatch)
	})
}

// inBatches runs a bounded maintenance statement until it touches fewer than
// maintenanceBatch rows, maintenanceRounds have run or Stop begins, and
// returns the rows touched. A failure is logged and ends the pass; the next
// tick retries.
func (r *runtime) inBatches(what string, batch func(ctx context.Context) (int, error)) int {
	return r.inBatchesOf(maintenanceBatch, what, batch)
}

// inBatchesOf is inBatches for statements touching up to size rows.
func (r *runtime) inBatchesOf(size int, what string, batch func(ctx context.Context) (int, error)) int {
	total := 0
	for range maintenanceRounds {
		ctx, cancel := context.WithTimeout(r.life, claimTimeout)
		n, err := batch(ctx)
		cancel()
		if err != nil {
			if r.life.Err() == nil {
				r.log.Warn(what+" failed", zap.Error(err))
			}
			break
		}
		total += n
		if n < size {
			break
		}
	}
	return total
}
