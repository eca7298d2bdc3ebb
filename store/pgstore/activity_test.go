package pgstore_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestActivity: finished jobs are summarized per kind and bucket wherever
// they are (the hot table, kept for their unique key, the history); live
// jobs and jobs outside the window are not counted.
func TestActivity(t *testing.T) {
	t.Parallel()
	s, pool := historyStore(t)
	ctx := ctxT(t)
	now := time.Now().UTC().Truncate(time.Minute)
	since := now.Add(-time.Hour)
	for _, q := range []string{
		historyPartitionsSQL,
		// Hot table: 3 succeeded in minute 10 (lag 2 s), 1 dead in minute 10 (lag 5 s).
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, attempted_at, finished_at)
		 SELECT gen_random_uuid(), 'mail', '{}', st, 2, $1::timestamptz + interval '10 minutes',
		        $1::timestamptz, 3, 1, 1, $1::timestamptz + interval '10 minutes' + lag, $1::timestamptz + interval '10 minutes 30 seconds'
		 FROM (VALUES ('succeeded', interval '2 seconds'), ('succeeded', interval '2 seconds'), ('succeeded', interval '2 seconds'),
		              ('dead', interval '5 seconds')) v(st, lag)`,
		// Kept for its unique key: 1 succeeded in minute 20.
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, attempted_at, finished_at,
		                      unique_key, unique_finished)
		 VALUES (gen_random_uuid(), 'mail', '{}', 'succeeded', 2, $1::timestamptz + interval '20 minutes', $1::timestamptz, 3, 1, 1,
		         $1::timestamptz + interval '20 minutes', $1::timestamptz + interval '20 minutes 1 second', 'k1', true)`,
		// History: 2 cancelled (never started) in minute 59 of kind pdf,
		// 1 succeeded before the window.
		`INSERT INTO ax.jobs_history (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, finished_at)
		 SELECT gen_random_uuid(), 'pdf', '{}', 'cancelled', 2, $1::timestamptz, $1::timestamptz, 3, 0, 0, $1::timestamptz + interval '59 minutes'
		 FROM generate_series(1, 2)`,
		`INSERT INTO ax.jobs_history (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, attempted_at, finished_at)
		 VALUES (gen_random_uuid(), 'pdf', '{}', 'succeeded', 2, $1::timestamptz, $1::timestamptz, 3, 1, 1, $1::timestamptz - interval '2 minutes',
		         $1::timestamptz - interval '1 minute')`,
		// Live: not counted.
		`INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
		 VALUES (gen_random_uuid(), 'mail', '{}', 2, $1::timestamptz, $1::timestamptz, 3)`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{since}
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Activity(ctx, since, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b store.ActivityBucket) int { return a.Index - b.Index })
	want := []store.ActivityBucket{
		{Kind: "mail", Index: 10, Succeeded: 3, Dead: 1, Started: 4, LagSum: 11 * time.Second, LagMax: 5 * time.Second},
		{Kind: "mail", Index: 20, Succeeded: 1, Started: 1},
		{Kind: "pdf", Index: 59, Cancelled: 2},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("activity:\n got %+v\nwant %+v", got, want)
	}
	if _, err := s.Activity(ctx, now, since, time.Minute); err == nil {
		t.Fatal("an empty window was taken")
	}
	if _, err := s.Activity(ctx, now.Add(-48*time.Hour), now, time.Minute); err == nil {
		t.Fatal("2,880 buckets were taken")
	}
}

// TestActivityPlan: on a history of 500,000 jobs over four days, the
// last hour's summary reads the hour's rows through the finished_at
// indexes (no sequential scan of jobs or of a history partition with
// more than a few pages), in a few hundred buffers. It asserts on the plan, not on time; the plan is
// logged.
func TestActivityPlan(t *testing.T) {
	t.Parallel()
	planTest(t, "inserts 500,000 rows")
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		historyPartitionsSQL,
		// 450,000 archived jobs over the 3.5 days up to 30 minutes ago (one
		// every 0.67 s),
		// 50,000 finished ones still in the hot table over the last 10
		// hours, and 50,000 live ones.
		`INSERT INTO ax.jobs_history (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, attempted_at, finished_at)
		 SELECT gen_random_uuid(), 'k' || (i % 10), '{}', CASE WHEN i % 47 = 0 THEN 'dead' ELSE 'succeeded' END, 2, t, t, 3, 1, 1, t, t
		 FROM generate_series(1, 450000) i, LATERAL (SELECT now() - interval '30 minutes' - i * interval '670 milliseconds' AS t) r
		 WHERE t >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '3 days'`,
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, attempted_at, finished_at)
		 SELECT gen_random_uuid(), 'k' || (i % 10), '{}', 'succeeded', 2, t, t, 3, 1, 1, t, t
		 FROM generate_series(1, 50000) i, LATERAL (SELECT now() - i * interval '720 milliseconds' AS t) r`,
		`INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
		 SELECT gen_random_uuid(), 'k' || (i % 10), '{}', 2, now() + i * interval '1 second', now(), 3
		 FROM generate_series(1, 50000) i`,
		`ANALYZE ax.jobs, ax.jobs_history`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	plan := explain(t, ctx, pool, s.ActivitySQL(), now.Add(-time.Hour), now, float64(60))
	t.Logf("plan of the last hour's activity:\n%s", plan)
	// No sequential scan of the hot table or of a history partition
	// that holds more than a small part of a day (the planner rightly
	// reads a day partition just begun whole: within the first hour after
	// midnight UTC the window spans two, and a CI run at 00:50 saw 1,839
	// rows of 36 pages read that way, where a day of this test holds
	// about 129,000); the buffer count bounds the rest.
	for _, m := range regexp.MustCompile(`Seq Scan on (\S+)[^\n]*rows=(\d+)`).FindAllStringSubmatch(plan, -1) {
		if n, _ := strconv.Atoi(m[2]); m[1] == "jobs" || n > 10_000 {
			t.Fatalf("a sequential scan of %s (%s rows):\n%s", m[1], m[2], plan)
		}
	}
	if n := planBuffers(t, plan); n > 5_000 {
		t.Fatalf("%d buffers for an hour of 7,700 jobs", n)
	}
	got, err := s.Activity(ctx, now.Add(-time.Hour), now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, b := range got {
		n += b.Succeeded + b.Dead + b.Cancelled
	}
	if n < 6500 || n > 9000 {
		t.Fatalf("%d jobs counted in the last hour, want about 7,700", n)
	}
}
