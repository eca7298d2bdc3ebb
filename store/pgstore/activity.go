package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.ActivityReader = (*Store)(nil)

// activitySQL summarizes the jobs that finished in [$1, $2) in buckets of
// $3 seconds. Finished jobs are in three places, each read through an
// index on finished_at, so the statement reads the window's rows and
// never the rest of the history: the hot table's finished jobs that
// Archive will move (jobs_finished_idx, whose predicate the first branch
// repeats word for word so the planner can use it), those that keep
// their unique key until pruned (jobs_kept_idx, likewise), and the
// history (jobs_history_finished_idx, in the one or two day partitions
// the window falls in). No new index is needed (checked by
// TestActivityPlan).
const activitySQL = `SELECT kind, floor(extract(epoch FROM finished_at - $1::timestamptz) / $3::float8)::int AS b,
	count(*) FILTER (WHERE state = 'succeeded'),
	count(*) FILTER (WHERE state = 'dead'),
	count(*) FILTER (WHERE state = 'cancelled'),
	count(attempted_at),
	coalesce(sum(extract(epoch FROM greatest(attempted_at - run_at, interval '0'))), 0)::float8,
	coalesce(max(extract(epoch FROM greatest(attempted_at - run_at, interval '0'))), 0)::float8
FROM (
	SELECT kind, state, finished_at, attempted_at, run_at FROM {jobs}
	WHERE finished_at >= $1 AND finished_at < $2
	  AND (state = 'cancelled' OR (state IN ('succeeded', 'dead') AND (unique_key IS NULL OR NOT unique_finished)))
	UNION ALL
	SELECT kind, state, finished_at, attempted_at, run_at FROM {jobs}
	WHERE finished_at >= $1 AND finished_at < $2
	  AND state IN ('succeeded', 'dead') AND unique_key IS NOT NULL AND unique_finished
	UNION ALL
	SELECT kind, state, finished_at, attempted_at, run_at FROM {jobs_history}
	WHERE finished_at >= $1 AND finished_at < $2
) f
GROUP BY 1, 2`

// Activity summarizes the jobs that finished in [since, until) per kind
// and bucket of step; see store.ActivityReader. It is one statement
// whose cost grows with the jobs finished in the window.
func (s *Store) Activity(ctx context.Context, since, until time.Time, step time.Duration) ([]store.ActivityBucket, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckActivity(since, until, step); err != nil {
		return nil, fmt.Errorf("pgstore: activity: %w", err)
	}
	q := replaceTable(replaceTable(activitySQL, "{jobs_history}", s.schema, "jobs_history"), "{jobs}", s.schema, "jobs")
	rows, _ := s.pool.Query(ctx, q, since, until, step.Seconds())
	var out []store.ActivityBucket
	var b store.ActivityBucket
	var lagSum, lagMax float64
	_, err := pgx.ForEachRow(rows, []any{&b.Kind, &b.Index, &b.Succeeded, &b.Dead, &b.Cancelled, &b.Started, &lagSum, &lagMax}, func() error {
		b.LagSum = time.Duration(lagSum * float64(time.Second))
		b.LagMax = time.Duration(lagMax * float64(time.Second))
		out = append(out, b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: activity: %w", invalidData(err))
	}
	return out, nil
}
