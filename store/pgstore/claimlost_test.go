package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// lostJob is one job of a TestClaimReplacesLostRowsInClaimOrder case:
// its name, kind, priority, how long it has been due, and whether another
// transaction holds its row lock during the claim (another claim in
// flight).
type lostJob struct {
	name     string
	kind     string
	priority int
	dueFor   time.Duration
	held     bool
}

// TestClaimReplacesLostRowsInClaimOrder claims while another transaction
// holds the row locks of some of the claim's first choices (another
// host's claim in flight): the claim must take, in their place, the
// next-best due jobs in claim order (aged first, then priority, then
// run_at), across priorities and kinds, within every limit. The second
// round used to replace lost rows only from the same (kind, priority)
// range, so a claim whose first choices were held at priority 1 took none
// of the free priority 2 jobs, and a held aged job was replaced by a fresh
// low-priority one ahead of due high-priority jobs. Each case claims
// through Claim and through FinishClaim's one round trip, which runs the
// same two rounds.
func TestClaimReplacesLostRowsInClaimOrder(t *testing.T) {
	t.Parallel()
	const age = 5 * time.Minute
	type claim struct {
		kinds []store.KindLimit
		limit int
		age   time.Duration
	}
	a := func(n int) []store.KindLimit { return []store.KindLimit{{Kind: "a", Limit: n}} }
	// manyHeld: 500 held jobs at priority 2 due before five free ones,
	// more than one run of the second round reads (claimLostFirst).
	var manyHeld []lostJob
	for i := range 500 {
		manyHeld = append(manyHeld, lostJob{fmt.Sprint("h", i), "a", 2, time.Minute - time.Duration(i)*time.Millisecond, true})
	}
	manyHeld = append(manyHeld, lostJob{"f1", "a", 2, 20 * time.Second, false}, lostJob{"f2", "a", 2, 19 * time.Second, false},
		lostJob{"f3", "a", 2, 18 * time.Second, false}, lostJob{"low", "a", 3, time.Minute, false})
	cases := []struct {
		name  string
		jobs  []lostJob
		claim claim
		want  []string // the names claimed, in claim order
	}{
		{
			name: "first choices held, five free at the next priority",
			jobs: []lostJob{
				{"h1", "a", 1, 30 * time.Second, true}, {"h2", "a", 1, 29 * time.Second, true}, {"h3", "a", 1, 28 * time.Second, true},
				{"f1", "a", 2, 20 * time.Second, false}, {"f2", "a", 2, 19 * time.Second, false}, {"f3", "a", 2, 18 * time.Second, false},
				{"f4", "a", 2, 17 * time.Second, false}, {"f5", "a", 2, 16 * time.Second, false},
			},
			claim: claim{a(3), 3, 0},
			want:  []string{"f1", "f2", "f3"},
		},
		{
			name: "first choices held, five free behind them",
			jobs: []lostJob{
				{"h1", "a", 2, 30 * time.Second, true}, {"h2", "a", 2, 29 * time.Second, true}, {"h3", "a", 2, 28 * time.Second, true},
				{"f1", "a", 2, 20 * time.Second, false}, {"f2", "a", 2, 19 * time.Second, false}, {"f3", "a", 2, 18 * time.Second, false},
				{"f4", "a", 2, 17 * time.Second, false}, {"f5", "a", 2, 16 * time.Second, false},
			},
			claim: claim{a(3), 3, 0},
			want:  []string{"f1", "f2", "f3"},
		},
		{
			name:  "many held ahead of the free ones",
			jobs:  manyHeld,
			claim: claim{a(3), 3, 0},
			want:  []string{"f1", "f2", "f3"},
		},
		{
			name: "held aged job replaced by due high-priority jobs, not a fresh low one",
			jobs: []lostJob{
				{"aged1", "a", 3, 10 * time.Minute, true}, {"aged2", "a", 3, 9 * time.Minute, false},
				{"low", "a", 3, 3 * time.Second, false},
				{"high1", "a", 1, 2 * time.Second, false}, {"high2", "a", 1, time.Second, false},
			},
			claim: claim{a(3), 3, age},
			want:  []string{"aged2", "high1", "high2"},
		},
		{
			name: "held aged jobs replaced by aged jobs of other priorities first",
			jobs: []lostJob{
				{"aged1", "a", 3, 10 * time.Minute, true}, {"aged2", "a", 2, 8 * time.Minute, false},
				{"aged3", "a", 1, 7 * time.Minute, false}, {"low", "a", 3, 9 * time.Minute / 10, false},
				{"high", "a", 1, time.Second, false},
			},
			claim: claim{a(2), 2, age},
			want:  []string{"aged2", "aged3"},
		},
		{
			name: "one kind's first choices held, another kind's free",
			jobs: []lostJob{
				{"ha1", "a", 1, 30 * time.Second, true}, {"ha2", "a", 1, 29 * time.Second, true},
				{"fa", "a", 2, 40 * time.Second, false},
				{"fb1", "b", 1, 20 * time.Second, false}, {"fb2", "b", 1, 19 * time.Second, false}, {"fb3", "b", 1, 18 * time.Second, false},
			},
			claim: claim{[]store.KindLimit{{Kind: "a", Limit: 3}, {Kind: "b", Limit: 3}}, 3, 0},
			want:  []string{"fb1", "fb2", "fb3"},
		},
		{
			name: "kind limits hold for the replacements",
			jobs: []lostJob{
				{"ha", "a", 1, 30 * time.Second, true},
				{"fa1", "a", 1, 29 * time.Second, false}, {"fa2", "a", 1, 28 * time.Second, false},
				{"fb1", "b", 2, 20 * time.Second, false}, {"fb2", "b", 2, 19 * time.Second, false}, {"fb3", "b", 2, 18 * time.Second, false},
			},
			claim: claim{[]store.KindLimit{{Kind: "a", Limit: 1}, {Kind: "b", Limit: 3}}, 3, 0},
			want:  []string{"fa1", "fb1", "fb2"},
		},
	}
	// The two ways to claim: Claim, and FinishClaim's one round trip,
	// which finishes a job of another kind claimed before.
	ways := []struct {
		name  string
		claim func(ctx context.Context, t *testing.T, s *pgstore.Store, params *store.ClaimParams) *store.ClaimResult
	}{
		{"Claim", func(ctx context.Context, t *testing.T, s *pgstore.Store, params *store.ClaimParams) *store.ClaimResult {
			res, err := s.Claim(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}},
		{"FinishClaim", func(ctx context.Context, t *testing.T, s *pgstore.Store, params *store.ClaimParams) *store.ClaimResult {
			lease := claimOne(t, s, "done")
			fr, res, err := s.FinishClaim(ctx, []store.FinishParams{{Lease: lease, Outcome: store.OutcomeSucceeded}}, params)
			if err != nil {
				t.Fatal(err)
			}
			if !fr.OK[0] {
				t.Fatal("the finish did not apply")
			}
			return res
		}},
	}
	for _, c := range cases {
		for _, way := range ways {
			t.Run(way.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				testClaimReplacesLostRows(t, c.jobs, &store.ClaimParams{Owner: "claimer", Kinds: c.claim.kinds,
					Limit: c.claim.limit, LeaseDuration: time.Minute, AgeAfter: c.claim.age}, way.claim, c.want)
			})
		}
	}
}

// testClaimReplacesLostRows is one case of
// TestClaimReplacesLostRowsInClaimOrder: it inserts jobs, holds the rows
// of the held ones, claims with params through claim, and checks that it
// got the jobs named in want, in that order.
func testClaimReplacesLostRows(t *testing.T, jobs []lostJob, params *store.ClaimParams,
	claim func(context.Context, *testing.T, *pgstore.Store, *store.ClaimParams) *store.ClaimResult, want []string) {
	ctx := ctxT(t)
	pool, s := newPoolStore(t)
	if _, err := s.Insert(ctx, []store.InsertParams{job("done")}); err != nil {
		t.Fatal(err)
	}
	names := map[uuid.UUID]string{}
	var held []uuid.UUID
	for _, j := range jobs {
		id := uuid.Must(uuid.NewV7())
		names[id] = j.name
		if j.held {
			held = append(held, id)
		}
		_, err := pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
			VALUES ($1, $2, '{}', $3, now() - $4::bigint * interval '1 microsecond', now(), 3)`,
			[16]byte(id), j.kind, j.priority, j.dueFor.Microseconds())
		if err != nil {
			t.Fatal(err)
		}
	}
	holdRows(t, ctx, pool, held)
	res := claim(ctx, t, s, params)
	got := make([]string, len(res.Jobs))
	for i, j := range res.Jobs {
		got[i] = names[j.ID]
	}
	if !slices.Equal(got, want) {
		t.Errorf("claimed %v, want %v", got, want)
	}
}

// holdRows locks the rows of ids in a transaction that stays open until
// the test ends, as another claim in flight holds its rows.
func holdRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM ax.jobs WHERE id = ANY($1) FOR UPDATE) l`, pgtest.IDs(ids)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(ids) {
		t.Fatalf("held %d rows, want %d", n, len(ids))
	}
}

// BenchmarkClaimNothingLost times the plain claim when no other claim
// holds a row: the common case, which the second round for lost rows must
// not slow down. Each op claims 10 jobs of three kinds from a backlog of
// 3,000 due jobs at three priorities; the claimed jobs are put back
// between ops, outside the timer. server-µs/op is the claim's time on the
// server, from its transaction's start (ClaimResult.Now) to its last row
// (ClaimResult.Clock), which the client's own scheduling does not add to
// on a loaded machine; its median is reported too.
func BenchmarkClaimNothingLost(b *testing.B) {
	ctx := ctxT(b)
	pool, s := newPoolStore(b)
	_, err := pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
		SELECT gen_random_uuid(), k, '{}', 1 + i % 3, now() - i * interval '1 millisecond', now(), 3
		FROM unnest('{a,b,c}'::text[]) k, generate_series(1, 1000) i`)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE ax.jobs`); err != nil {
		b.Fatal(err)
	}
	params := &store.ClaimParams{Owner: "bench", Limit: 10, LeaseDuration: time.Minute,
		Kinds: []store.KindLimit{{Kind: "a", Limit: 10}, {Kind: "b", Limit: 10}, {Kind: "c", Limit: 10}}}
	ids := make([]uuid.UUID, 0, 10)
	server := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		res, err := s.Claim(ctx, params)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Jobs) != 10 {
			b.Fatalf("claimed %d jobs, want 10", len(res.Jobs))
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
}
