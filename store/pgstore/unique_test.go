package pgstore_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestConcurrentUniqueInserts races single and batch inserts of the same
// unique keys: each key gets exactly one job, and every caller learns its ID.
func TestConcurrentUniqueInserts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		batch int // rows per Insert call: 1 takes the one-statement path
	}{
		{"Single", 1},
		{"Batch", 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			ctx := ctxT(t)
			const workers, keys = 8, 20
			results := make([][]store.InsertResult, workers)
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					for k := 0; k < keys; k += c.batch {
						var ps []store.InsertParams
						for i := k; i < k+c.batch; i++ {
							p := job("uniq")
							p.UniqueKey = "key-" + string(rune('a'+i))
							ps = append(ps, p)
						}
						if w%2 == 1 { // opposite key orders must not deadlock
							slices.Reverse(ps)
						}
						res, err := s.Insert(ctx, ps)
						if err != nil {
							errs <- err
							return
						}
						if w%2 == 1 {
							slices.Reverse(res)
						}
						results[w] = append(results[w], res...)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for k := range keys {
				var holder uuid.UUID
				inserted := 0
				for w := range workers {
					r := results[w][k]
					if !r.Duplicate {
						inserted++
					}
					if holder == uuid.Nil {
						holder = r.ID
					}
					if r.ID != holder {
						t.Fatalf("key %d: IDs %s and %s", k, holder, r.ID)
					}
				}
				if inserted != 1 {
					t.Fatalf("key %d inserted %d times", k, inserted)
				}
			}
		})
	}
}

// TestUniqueScopeOneAndMany checks that the one-row insert, which places a
// Period key in its window in SQL, and the many-row insert, which places
// it from one reading of the store clock, agree on where a key holds: in
// every scope, a key inserted by either path is held against the other,
// and the many-row path names the holder of each duplicate row.
func TestUniqueScopeOneAndMany(t *testing.T) {
	t.Parallel()
	scopes := []store.UniqueScope{
		{}, {Global: true}, {Finished: true}, {Period: store.MaxUniquePeriod},
		{Global: true, Period: store.MaxUniquePeriod},
	}
	for _, u := range scopes {
		t.Run(fmt.Sprintf("%+v", u), func(t *testing.T) {
			s := newStore(t)
			ctx := ctxT(t)
			keyed := func(kind, key string) store.InsertParams {
				p := job(kind)
				p.UniqueKey, p.Unique = key, u
				return p
			}
			window := func() int64 {
				now, err := s.Now(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return now.Unix() / int64(store.MaxUniquePeriod/time.Second)
			}
			before := window()
			one := keyed("k", "one")
			if _, err := s.Insert(ctx, []store.InsertParams{one}); err != nil {
				t.Fatal(err)
			}
			many := []store.InsertParams{keyed("k", "many"), keyed("k", "fresh"), keyed("k", "one")}
			res, err := s.Insert(ctx, many)
			if err != nil {
				t.Fatal(err)
			}
			again, err := s.Insert(ctx, []store.InsertParams{keyed("k", "many")})
			if err != nil {
				t.Fatal(err)
			}
			if window() != before {
				t.Skip("the store clock crossed a window boundary of a year") // once in decades
			}
			want := []store.InsertResult{{ID: many[0].ID}, {ID: many[1].ID}, {ID: one.ID, Duplicate: true}}
			if !slices.Equal(res, want) {
				t.Errorf("many-row insert: %+v, want %+v", res, want)
			}
			if want := (store.InsertResult{ID: many[0].ID, Duplicate: true}); again[0] != want {
				t.Errorf("one-row insert of a key the many-row one took: %+v, want %+v", again[0], want)
			}
		})
	}
}

// TestUniqueKeysChurn races inserts of a few keys, one row and many rows
// at a time, with a worker that claims and ends their jobs, so that
// holders keep giving their keys up (a success, a death, a cancel) between
// an insert's conflict and its lookup of the holder. Every insert must
// still end in a job or a named holder, and no two live jobs share a key.
func TestUniqueKeysChurn(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	const kind, keys, rounds = "churn", 4, 40
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		outcomes := []store.Outcome{store.OutcomeSucceeded, store.OutcomeDead, store.OutcomeCancelled}
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			res, err := s.Claim(ctx, &store.ClaimParams{Owner: "churn", Kinds: []store.KindLimit{{Kind: kind, Limit: keys}},
				Limit: keys, LeaseDuration: time.Minute})
			if err != nil {
				done <- err
				return
			}
			var ends []store.FinishParams
			for i, j := range res.Jobs {
				ends = append(ends, store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken},
					Outcome: outcomes[(n+i)%len(outcomes)], Error: "churn"})
			}
			if _, err := s.Finish(ctx, ends); err != nil {
				done <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for r := range rounds {
				var ps []store.InsertParams
				for k := range 1 + w%2*(keys-1) { // one row, or every key
					p := job(kind)
					p.UniqueKey = fmt.Sprintf("key-%d", (k+r)%keys)
					ps = append(ps, p)
				}
				res, err := s.Insert(ctx, ps)
				if err != nil {
					errs <- err
					return
				}
				for i, x := range res {
					if x.ID == uuid.Nil || (!x.Duplicate && x.ID != ps[i].ID) {
						errs <- fmt.Errorf("row %d: result %+v", i, x)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	jobs, err := s.List(ctx, &store.ListParams{Kind: kind, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]int{}
	for _, j := range jobs {
		if !j.State.Final() {
			live[j.UniqueKey]++
		}
	}
	for k, n := range live {
		if n > 1 {
			t.Errorf("key %s held by %d live jobs", k, n)
		}
	}
	t.Logf("%d jobs for %d keys", len(jobs), keys)
}

// TestUniqueHolderPlans checks that the lookups of unique-key holders are
// planned on jobs_unique_scope_idx, not on a scan of jobs, with 200,000
// finished keyed jobs in the table (which the index leaves out).
func TestUniqueHolderPlans(t *testing.T) {
	t.Parallel()
	planTest(t, "inserts 200k rows")
	pool := pgtest.Pool(t)
	ctx := ctxT(t)
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		`INSERT INTO ax.jobs (id, kind, payload, state, priority, run_at, scheduled_at, max_attempts, unique_key, finished_at)
		 SELECT gen_random_uuid(), 'k', '{}', 'succeeded', 2, now(), now(), 3, 'key-' || i, now()
		 FROM generate_series(1, 200000) i`,
		`INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts, unique_key)
		 SELECT gen_random_uuid(), 'k', '{}', 2, now(), now(), 3, 'live-' || i
		 FROM generate_series(1, 1000) i`,
		`ANALYZE ax.jobs`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		sql  string
		args []any
	}{
		{"InsertOne", s.InsertOneSQL(), []any{[16]byte(uuid.New()), "k", []byte(`{}`), nil, 2, nil, int64(0), 3, "live-7", "ch",
			false, false, int32(0), "", false}},
		{"Holders", s.HoldersSQL(), []any{[]string{"k", ""}, []int32{0, 0}, []int64{0, 0}, []string{"live-7", "key-9"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := explainWith(t, ctx, pool, "COSTS OFF", c.sql, c.args...)
			t.Logf("plan:\n%s", plan)
			if !strings.Contains(plan, "jobs_unique_scope_idx") {
				t.Error("the lookup does not use jobs_unique_scope_idx")
			}
			if s := seqScans(plan); len(s) > 0 {
				t.Errorf("the lookup scans %v sequentially", s)
			}
		})
	}
}
