package pgstore_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestDeadGroupsPlanUsesFailedIndexes: DeadGroups finds the dead jobs
// through the partial indexes of failed jobs, live and archived, rather
// than reading every job: with 100,000 succeeded jobs in each table and
// 200 dead ones, the plan has no sequential scan of jobs or of a history
// partition. It asserts on the plan, not on time; the plan is logged.
func TestDeadGroupsPlanUsesFailedIndexes(t *testing.T) {
	t.Parallel()
	planTest(t, "inserts 200,000 rows")
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, finished_at)
		 SELECT gen_random_uuid(), 'k', '{}', 'succeeded', 2, now() - interval '1 day', now() - interval '1 day', 3, 1, 1,
		        now() - i * interval '1 millisecond'
		 FROM generate_series(1, 100000) i`,
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, finished_at, errors)
		 SELECT gen_random_uuid(), 'k' || (i % 3), '{}', 'dead', 2, now() - interval '1 day', now() - interval '1 day', 1, 1, 1,
		        now() - i * interval '1 millisecond', jsonb_build_array(jsonb_build_object('attempt', 1, 'error', 'boom ' || (i % 5) || E'\n at x'))
		 FROM generate_series(1, 100) i`,
		historyPartitionsSQL,
		`INSERT INTO ax.jobs_history (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, finished_at)
		 SELECT gen_random_uuid(), 'k', '{}', 'succeeded', 2, now() - interval '1 day', now() - interval '1 day', 3, 1, 1,
		        now() - interval '1 hour' - i * interval '1 millisecond'
		 FROM generate_series(1, 100000) i`,
		`INSERT INTO ax.jobs_history (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, attempt, fence, finished_at, errors)
		 SELECT gen_random_uuid(), 'k' || (i % 3), '{}', 'dead', 2, now() - interval '1 day', now() - interval '1 day', 1, 1, 1,
		        now() - interval '1 hour' - i * interval '1 millisecond', jsonb_build_array(jsonb_build_object('attempt', 1, 'error', 'boom ' || (i % 5)))
		 FROM generate_series(1, 100) i`,
		`ANALYZE ax.jobs, ax.jobs_history`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []store.DeadGroupsParams{
		{Limit: 50},
		{Kinds: []string{"k1"}, Limit: 50},
		{ExceptKinds: []string{"k1"}, DiedAfter: time.Now().Add(-24 * time.Hour), Limit: 50},
	} {
		q, args, err := s.DeadGroupsSQL(&p)
		if err != nil {
			t.Fatal(err)
		}
		plan := explain(t, ctx, pool, q, args...)
		t.Logf("%+v:\n%s", p, plan)
		// Empty history partitions (never analyzed) are scanned whole,
		// reading nothing (seqScans leaves them out): a scan that reads
		// jobs shows them removed.
		if len(seqScans(plan)) > 0 || removedRE.MatchString(plan) {
			t.Errorf("%+v: the plan reads the succeeded jobs", p)
		}
		rep, err := s.DeadGroups(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Groups) == 0 {
			t.Errorf("%+v: no group", p)
		}
	}
}

// removedRE finds a scan that read (and dropped) a thousand rows or more.
var removedRE = regexp.MustCompile(`Rows Removed by Filter: \d{4,}`)
