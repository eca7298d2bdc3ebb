package pgstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestClaimOrderIsPostgresOrder checks the claim order the Store sorts
// claimed jobs into (the statement returns them unordered) against
// PostgreSQL's ORDER BY of plainClaimOrderSQL, the order ranked picks
// them in: jobs of three priorities, some due long enough to be aged,
// with ties of run_at, claimed with and without AgeAfter.
func TestClaimOrderIsPostgresOrder(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, s := newPoolStore(t)
	for _, c := range []struct {
		name string
		age  time.Duration
	}{
		{"no aging", 0},
		{"aging after 5 minutes", 5 * time.Minute},
		{"aging after a fraction of a microsecond", 300*time.Second + 1500*time.Nanosecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			kind := uuid.NewString()
			// 240 jobs due 0–10 minutes ago, three priorities, every
			// run_at and priority shared by two jobs (ties go by id).
			_, err := pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
				SELECT gen_random_uuid(), $1, '{}', 1 + ((i / 2) * 7) % 3, t, t, 3
				FROM generate_series(1, 240) i,
				     LATERAL (SELECT date_trunc('second', now()) - (i / 2) * interval '5 seconds' AS t) r`, kind)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Claim(ctx, &store.ClaimParams{Owner: "order", Kinds: []store.KindLimit{{Kind: kind, Limit: 240}},
				Limit: 240, LeaseDuration: time.Minute, AgeAfter: c.age})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Jobs) != 240 {
				t.Fatalf("claimed %d jobs, want 240", len(res.Jobs))
			}
			ids := make([]uuid.UUID, len(res.Jobs))
			for i, j := range res.Jobs {
				ids[i] = j.ID
			}
			rows, _ := pool.Query(ctx, `SELECT id FROM (
				SELECT id, priority, run_at,
				       ($2::bigint > 0 AND run_at <= $3::timestamptz - $2::bigint * interval '1 microsecond') AS aged
				FROM ax.jobs WHERE id = ANY($1)) c
				ORDER BY `+pgstore.PlainClaimOrderSQL, pgtest.IDs(ids), int64(c.age/time.Microsecond), res.Now)
			want, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
			if err != nil {
				t.Fatal(err)
			}
			aged := 0
			for i, j := range res.Jobs {
				if c.age > 0 && !j.RunAt.After(res.Now.Add(-c.age)) {
					aged++
				}
				if j.ID != want[i] {
					t.Fatalf("job %d of the claim is %s (priority %d, run_at %s), PostgreSQL's order has %s",
						i, j.ID, j.Priority, j.RunAt.Format(time.RFC3339Nano), uuid.UUID(want[i]))
				}
			}
			if c.age > 0 && (aged == 0 || aged == len(res.Jobs)) {
				t.Fatalf("%d of %d jobs aged: the case does not mix aged and fresh jobs", aged, len(res.Jobs))
			}
		})
	}
}
