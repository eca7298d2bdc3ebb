package pgstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
)

// TestClaimsStepOverHeldRows: beside another claim in flight that holds
// the 50 oldest jobs (a transaction left open), claims of 25 take the
// next jobs in claim order. The open claim (two kinds, neither limit
// binding) starts with no spare rows, so it loses its first choices and
// its second round takes the next 25; it learns from that, and the next
// claim takes the 25 after them in its one statement. The claim of one
// kind steps over the held rows in its statement from the first. Once
// the other claim ends, claims take the oldest jobs first again, and the
// spare rows decay to none.
func TestClaimsStepOverHeldRows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		kinds []store.KindLimit
		// secondRounds after the first claim; spare: whether the
		// Store reads spare rows after it.
		secondRounds int
		spare        bool
	}{
		{"open", []store.KindLimit{{Kind: "a", Limit: 25}, {Kind: "b", Limit: 25}}, 1, true},
		{"one kind", []store.KindLimit{{Kind: "a", Limit: 25}}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			s, pool, tracer := newTracedStore(t)

			// 200 due jobs, each a millisecond older than the next:
			// ids in claim order.
			base := time.Now().Add(-time.Minute)
			jobs := make([]store.InsertParams, 200)
			order := make([]uuid.UUID, len(jobs))
			for i := range jobs {
				jobs[i] = job("a")
				jobs[i].RunAt = base.Add(time.Duration(i) * time.Millisecond)
				order[i] = jobs[i].ID
			}
			_, err := s.Insert(ctx, jobs)
			require.NoError(t, err)

			held, err := pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = held.Rollback(context.Background()) })
			tag, err := held.Exec(ctx, `SELECT 1 FROM ax.jobs WHERE id = ANY ($1) FOR UPDATE`, pgtest.IDs(order[:50]))
			require.NoError(t, err)
			require.EqualValues(t, 50, tag.RowsAffected())

			params := &store.ClaimParams{Owner: "n", Limit: 25, LeaseDuration: time.Minute, Kinds: c.kinds}
			claimed := map[uuid.UUID]bool{}
			claim := func() []uuid.UUID {
				t.Helper()
				res, err := s.Claim(ctx, params)
				require.NoError(t, err)
				ids := make([]uuid.UUID, len(res.Jobs))
				for i, j := range res.Jobs {
					ids[i] = j.ID
					require.False(t, claimed[j.ID], "job %s claimed twice", j.ID)
					claimed[j.ID] = true
				}
				return ids
			}
			secondRounds := func() int { return tracer.together(s.ClaimLostSQL(), s.ClaimLostSQL()) }

			require.Equal(t, order[50:75], claim(), "the first claim, beside the held rows")
			require.Equal(t, c.secondRounds, secondRounds(), "second rounds of the first claim")
			require.Equal(t, c.spare, s.ClaimSpare() > 0, "spare rows after stepping over held ones")

			require.Equal(t, order[75:100], claim(), "the second claim, beside the held rows")
			require.Equal(t, c.secondRounds, secondRounds(), "the second claim stepped over the held rows in its statement")

			require.NoError(t, held.Rollback(ctx))
			require.Equal(t, order[:25], claim(), "the oldest first once the other claim ended")
			for range 20 {
				if s.ClaimSpare() == 0 {
					break
				}
				claim()
			}
			require.Zero(t, s.ClaimSpare(), "spare rows of a claim alone")
			require.Equal(t, c.secondRounds, secondRounds())
			var running int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs WHERE state = 'running'`).Scan(&running))
			require.Equal(t, len(claimed), running)
		})
	}
}

// BenchmarkClaimStatements times each claim statement alone on the same
// backlog, 100 jobs a claim from 20,000 due jobs of one kind sharing one
// run_at (a batch insert): the claim of one kind, the open claim (a
// second kind with no jobs, neither limit binding) and the plain claim
// (the kind's limit binds: 100 of a claim of 101). The claimed jobs are
// put back between ops, outside the timer. server-µs/op is as in
// BenchmarkClaimNothingLost.
func BenchmarkClaimStatements(b *testing.B) {
	cases := []struct {
		name  string
		limit int
		kinds []store.KindLimit
	}{
		{"one kind", 100, []store.KindLimit{{Kind: "a", Limit: 100}}},
		{"open", 100, []store.KindLimit{{Kind: "a", Limit: 100}, {Kind: "b", Limit: 100}}},
		{"plain", 101, []store.KindLimit{{Kind: "a", Limit: 100}, {Kind: "b", Limit: 100}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := ctxT(b)
			pool, s := newPoolStore(b)
			_, err := pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
				SELECT gen_random_uuid(), 'a', '{}', 2, now() - interval '1 second', now(), 3 FROM generate_series(1, 20000)`)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE ax.jobs`); err != nil {
				b.Fatal(err)
			}
			params := &store.ClaimParams{Owner: "bench", Limit: c.limit, LeaseDuration: time.Minute, Kinds: c.kinds}
			ids := make([]uuid.UUID, 0, 100)
			server := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				res, err := s.Claim(ctx, params)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Jobs) != 100 {
					b.Fatalf("claimed %d jobs, want 100", len(res.Jobs))
				}
				b.StopTimer()
				server = append(server, res.Clock.Sub(res.Now))
				ids = ids[:0]
				for _, j := range res.Jobs {
					ids = append(ids, j.ID)
				}
				if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET state = 'scheduled', owner = '', lease_token = NULL,
					lease_expires_at = NULL, attempt = 0 WHERE id = ANY($1)`, pgtest.IDs(ids)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			var sum time.Duration
			for _, d := range server {
				sum += d
			}
			slices.Sort(server)
			b.ReportMetric(float64(sum.Microseconds())/float64(len(server)), "server-µs/op")
			b.ReportMetric(float64(server[len(server)/2].Microseconds()), "server-p50-µs")
		})
	}
}
