package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// TestClaimStepsOverAHeldClaim holds one claim open at the head of the
// queue (another host's claim in flight) and makes a second claim beside
// it (both rounds, claimLostSQL after the claim statement, or the open
// claim and, when it needs one, its second round), also held open: the
// second must take all it asked for, none of the held claim's jobs, and
// lock no row it does not take. A claim used to retry only over
// its candidates' spare quarter, so a small claim beside a larger one got
// none (issue 24: half the claims of four hosts came back empty); this
// fails on that code in every case.
func TestClaimStepsOverAHeldClaim(t *testing.T) {
	t.Parallel()
	type claim struct {
		kinds  []string
		limits []int32
		limit  int32
	}
	one := func(n int32) claim { return claim{[]string{"a"}, []int32{n}, n} }
	cases := []struct {
		name          string
		first, second claim
		want          map[string]int // jobs of each kind the second claim takes
	}{
		{"small beside large", one(50), one(5), map[string]int{"a": 5}},
		{"equal", one(50), one(50), map[string]int{"a": 50}},
		{"larger beside small", one(10), one(30), map[string]int{"a": 30}},
		{"kind limits", one(40), claim{[]string{"a", "b"}, []int32{5, 5}, 10}, map[string]int{"a": 5, "b": 5}},
	}
	// The second claim is made by the plain claim statement, and, in the
	// cases of one kind whose limit does not bind, also by the open claim
	// (claimopen.go), reading no spare row (it then loses its first
	// choices and its second round steps over the held rows, as the
	// plain claim's) or enough to step over them in the statement, and
	// by the claim of one kind.
	type variant struct {
		name  string
		open  bool
		spare int64
		one   bool
		age   int64 // µs, the claim of one kind's $7
	}
	plain := []variant{{name: "plain"}}
	open := append(plain, variant{name: "open", open: true}, variant{name: "open spare", open: true, spare: 64}, variant{name: "one kind", one: true},
		variant{name: "one kind aging", one: true, age: int64(time.Hour / time.Microsecond)})
	type run struct {
		name          string
		first, second claim
		want          map[string]int
		v             variant
	}
	var runs []run
	for _, c := range cases {
		vs := plain
		if c.second.limits[0] == c.second.limit && len(c.second.kinds) == 1 {
			vs = open
		}
		for _, v := range vs {
			runs = append(runs, run{c.name + "/" + v.name, c.first, c.second, c.want, v})
		}
	}
	for _, c := range runs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			pool := pgtest.Pool(t)
			s, err := pgstore.New(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// 200 due jobs of each kind at normal priority, and 200 of
			// kind a at low priority, which must not stand in for them.
			_, err = pool.Exec(ctx, `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
				SELECT gen_random_uuid(), k, '{}', p, t, t, 3
				FROM (VALUES ('a', 2), ('b', 2), ('a', 3)) AS r(k, p), generate_series(1, 200) i,
				     LATERAL (SELECT now() - i * interval '1 millisecond' AS t) ts`)
			if err != nil {
				t.Fatal(err)
			}
			// hold makes a claim as the Store does, its second round
			// (for the first choices it lost) included, in a transaction
			// left open.
			hold := func(cl claim, owner string, v variant) (pgx.Tx, map[uuid.UUID]string) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
				got := map[uuid.UUID]string{}
				taken := map[string]int32{}
				// read reads the rows of a round whose job columns
				// start at col: id, kind, payload, metadata, state,
				// priority, … The first round's start with now, clock,
				// next, held and lost; the second's with clock and more.
				read := func(rows pgx.Rows, col int) (now time.Time, lost int64) {
					for rows.Next() {
						v, err := rows.Values()
						if err != nil {
							t.Fatal(err)
						}
						if col >= 5 {
							now, _ = v[0].(time.Time)
							lost, _ = v[4].(int64)
						}
						b, ok := v[col].([16]byte)
						if !ok {
							continue
						}
						kind, _ := v[col+1].(string)
						if p, _ := v[col+5].(int16); p != 2 {
							t.Errorf("%s claimed a job of priority %d while normal ones were due", owner, p)
						}
						got[uuid.UUID(b)] = kind
						taken[kind]++
					}
					if err := rows.Err(); err != nil {
						t.Fatal(err)
					}
					return now, lost
				}
				args := []any{cl.kinds, cl.limits, cl.limit, owner, int64(60e6), int64(0), nil, int64(0)}
				sql, col := s.ClaimSQL(), 5
				if v.open {
					sql, col, args = s.ClaimOpenSQL(), 6, append(args, v.spare)
				}
				if v.one {
					sql, args = s.ClaimOneKindSQL(), []any{cl.kinds[0], cl.limit, nil, owner, int64(60e6), int64(0), v.age}
				}
				rows, _ := tx.Query(ctx, sql, args...)
				now, lost := read(rows, col)
				if lost == 0 {
					return tx, got
				}
				left := make([]int32, len(cl.kinds))
				for i, k := range cl.kinds {
					left[i] = cl.limits[i] - taken[k]
				}
				// Enough rows to step over the held claim's at once
				// (the Store starts with fewer and reads more if need be).
				rows, _ = tx.Query(ctx, s.ClaimLostSQL(), cl.kinds, left, cl.limit-int32(len(got)), owner, int64(60e6),
					int64(0), nil, int64(0), now, int32(200))
				read(rows, 2)
				return tx, got
			}
			_, first := hold(c.first, "first", plain[0])
			if len(first) != int(c.first.limit) {
				t.Fatalf("the first claim took %d jobs, want %d", len(first), c.first.limit)
			}
			_, second := hold(c.second, "second", c.v)
			perKind := map[string]int{}
			for id, kind := range second {
				perKind[kind]++
				if _, ok := first[id]; ok {
					t.Errorf("job %s claimed by both", id)
				}
			}
			for kind, n := range c.want {
				if perKind[kind] != n {
					t.Errorf("the second claim took %d jobs of kind %s, want %d (%v)", perKind[kind], kind, n, perKind)
				}
			}
			var unlocked int
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM ax.jobs FOR UPDATE SKIP LOCKED) s`).Scan(&unlocked); err != nil {
					return err
				}
				return errRollback
			})
			if err != errRollback {
				t.Fatal(err)
			}
			if locked := 600 - unlocked; locked != len(first)+len(second) {
				t.Errorf("the two claims hold %d row locks for the %d jobs they took", locked, len(first)+len(second))
			}
		})
	}
}
