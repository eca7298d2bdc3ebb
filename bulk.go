package ax

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// DefaultBulkBatch is how many jobs one store call of a bulk method
// changes unless BatchSize says otherwise: small enough that each
// transaction stays short and never holds up claims for long.
const DefaultBulkBatch = 1000

// BulkOption configures Admin.RetryJobs, CancelJobs and DeleteJobs.
type BulkOption interface {
	applyBulk(*bulkSettings) error
}

type bulkSettings struct {
	batch    int
	matchAll bool
}

type bulkOptionFunc func(*bulkSettings) error

func (f bulkOptionFunc) applyBulk(s *bulkSettings) error { return f(s) }

// BatchSize sets how many jobs each store call of a bulk method changes,
// 1 to store.MaxBulkLimit (10,000). Defaults to DefaultBulkBatch. Out of
// range is an error wrapping ErrInvalidOption.
func BatchSize(n int) BulkOption {
	return bulkOptionFunc(func(s *bulkSettings) error {
		if n < 1 || n > store.MaxBulkLimit {
			return fmt.Errorf("%w: BatchSize(%d) not in [1, %d]", ErrInvalidOption, n, store.MaxBulkLimit)
		}
		s.batch = n
		return nil
	})
}

// MatchAll lets DeleteJobs take a filter that selects every job. Without
// it, such a filter is refused with ErrFilterMatchesAll.
func MatchAll() BulkOption {
	return bulkOptionFunc(func(s *bulkSettings) error {
		s.matchAll = true
		return nil
	})
}

// RetryJobs makes the jobs f selects due now: dead and cancelled jobs are
// scheduled again, their attempts numbered on and their errors kept
// (the next attempt is n+1, with one more allowed when all were used), paused
// jobs are resumed, and scheduled or retrying jobs not yet due are
// brought forward. This is how failures are retried by hand, in bulk
// (RunNow does it for one job). Running, succeeded and already due jobs
// are left alone, and so is a dead or cancelled job whose unique key
// another job took meanwhile. It returns how many jobs it changed.
//
// The change is made in batches (BatchSize), each one atomic, until a
// batch changes fewer jobs than its size, so it never holds many rows at
// once; if ctx ends or the store fails midway, the jobs changed so far
// stay changed and their number is returned with the error. Jobs made
// due wake the hosts that handle them.
//
// Errors: ErrInvalidFilter, ErrInvalidOption, errors.ErrUnsupported (the
// store does not implement store.BulkController), or the store's error,
// wrapped.
func (a *Admin) RetryJobs(ctx context.Context, f JobFilter, opts ...BulkOption) (int, error) {
	return a.bulk(ctx, store.BulkRunNow, f, opts)
}

// CancelJobs cancels the jobs f selects: scheduled, retrying and paused
// jobs at once; running jobs are asked to stop (their handlers' contexts
// are cancelled with cause ErrJobCancelled at their hosts' next
// heartbeat, within Config.HeartbeatInterval, and the attempts end as
// cancelled unless they succeed first). Final jobs, and running jobs
// already asked to stop, are left alone. It returns how many jobs it
// changed. Batches and errors are as for RetryJobs.
func (a *Admin) CancelJobs(ctx context.Context, f JobFilter, opts ...BulkOption) (int, error) {
	return a.bulk(ctx, store.BulkCancel, f, opts)
}

// DeleteJobs deletes the finished jobs (succeeded, dead, cancelled) f
// selects, before the pruner would; live jobs are left alone (cancel
// them first). A filter that selects every job (the zero JobFilter) is
// refused with ErrFilterMatchesAll unless MatchAll is given. It returns
// how many jobs it deleted. Batches and errors are as for RetryJobs.
func (a *Admin) DeleteJobs(ctx context.Context, f JobFilter, opts ...BulkOption) (int, error) {
	return a.bulk(ctx, store.BulkDelete, f, opts)
}

// bulk applies op to the jobs f selects, in batches until one changes
// fewer jobs than its size: the store leaves a changed job alone on the
// next call (see store.BulkOp), so the loop ends.
func (a *Admin) bulk(ctx context.Context, op store.BulkOp, f JobFilter, opts []BulkOption) (int, error) {
	what := op.String() + " jobs"
	if err := checkContext(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	set := bulkSettings{batch: DefaultBulkBatch}
	for _, o := range opts {
		if o == nil {
			return 0, fmt.Errorf("%s: %w: nil option", what, ErrInvalidOption)
		}
		if err := o.applyBulk(&set); err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
	}
	bc, ok := a.store.(store.BulkController)
	if !ok {
		return 0, unsupported(what, a.store, "store.BulkController")
	}
	if err := checkFilter(&f); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if op == store.BulkDelete && f.IsZero() && !set.matchAll {
		return 0, fmt.Errorf("%s: %w: give a filter, or MatchAll to delete every finished job", what, ErrFilterMatchesAll)
	}
	total := 0
	for {
		n, err := bc.Bulk(ctx, &store.BulkParams{Filter: f, Op: op, Limit: set.batch})
		total += n
		if err != nil {
			a.auditBulk(op, total)
			return total, fmt.Errorf("%s: stopped after %d changed: %w", what, total, err)
		}
		if n < set.batch {
			break
		}
	}
	a.auditBulk(op, total)
	if r := a.runtime(); r != nil && op == store.BulkRunNow && total > 0 {
		r.wake() // the store notifies too; this saves this host the round trip
	}
	return total, nil
}

func (a *Admin) auditBulk(op store.BulkOp, n int) {
	if n > 0 {
		a.audit("jobs changed in bulk", zap.String("operation", op.String()), zap.Int("jobs", n))
	}
}
