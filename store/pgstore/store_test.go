package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

func TestNewUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close() // goleak in TestMain checks nothing is left running
	s, err := pgstore.New(ctx, pool)
	if err == nil {
		s.Close()
		t.Fatal("New on an unreachable database: no error")
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error does not name the host: %v", err)
	}
}

// recorder collects notifications.
type recorder struct {
	mu  sync.Mutex
	got []store.Notification
	ch  chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) record(n store.Notification) {
	r.mu.Lock()
	r.got = append(r.got, n)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// waitKind waits for a notification of kind and returns it.
func (r *recorder) waitKind(t *testing.T, kind string, timeout time.Duration) (store.Notification, bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, n := range r.got {
			if n.Kind == kind {
				r.mu.Unlock()
				return n, true
			}
		}
		r.mu.Unlock()
		select {
		case <-r.ch:
		case <-deadline.C:
			return store.Notification{}, false
		}
	}
}

func TestInsertTx(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		rows   int
		unique bool
		commit bool
	}{
		{"OneRolledBack", 1, false, false},
		{"OneCommitted", 1, false, true},
		{"OneUniqueCommitted", 1, true, true},
		{"ManyRolledBack", 50, false, false},
		{"ManyCommitted", 50, false, true},
		{"ManyUniqueCommitted", 50, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a database of its own
			pool := pgtest.Pool(t)
			ctx := ctxT(t)
			s, err := pgstore.New(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec := newRecorder()
			defer s.Subscribe(rec.record)()

			kind := "tx." + c.name
			ps := make([]store.InsertParams, c.rows)
			for i := range ps {
				ps[i] = job(kind)
				// Spaces and key order a jsonb column would have changed.
				ps[i].Payload = []byte(`{"b":1,  "a":[2, 3]}`)
				ps[i].Delay = time.Duration(i) * time.Second
				if c.unique {
					ps[i].UniqueKey = ps[i].ID.String()
				}
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			// A business write in the same transaction.
			if _, err := tx.Exec(ctx, `CREATE TABLE orders (id int)`); err != nil {
				t.Fatal(err)
			}
			res, err := s.InsertTx(ctx, tx, ps)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != c.rows || res[0].ID != ps[0].ID || res[0].Duplicate {
				t.Fatalf("results %+v", res)
			}
			// Invisible and silent before commit.
			if _, err := s.Get(ctx, ps[0].ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("job visible before commit: %v", err)
			}
			if c.commit {
				start := time.Now()
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				n, ok := rec.waitKind(t, kind, 5*time.Second)
				if !ok {
					t.Fatal("no notification after commit")
				}
				t.Logf("notified %s after commit", time.Since(start))
				for _, p := range ps {
					j, err := s.Get(ctx, p.ID)
					if err != nil {
						t.Fatal(err)
					}
					if n.RunAt.After(j.RunAt) {
						t.Fatalf("notified run_at %s after job's %s", n.RunAt, j.RunAt)
					}
					if string(j.Payload) != string(p.Payload) {
						t.Fatalf("payload %s came back as %s", p.Payload, j.Payload)
					}
					if !j.ScheduledAt.Equal(j.RunAt) {
						t.Fatalf("ScheduledAt %s is not the inserted run_at %s", j.ScheduledAt, j.RunAt)
					}
				}
				return
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if _, err := s.Get(ctx, p.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("job %s exists after rollback: %v", p.ID, err)
				}
			}
			// A notification would have come with the first insert after
			// rollback had the rolled back one been sent.
			if _, err := s.Insert(ctx, []store.InsertParams{job("tx.marker")}); err != nil {
				t.Fatal(err)
			}
			if _, ok := rec.waitKind(t, "tx.marker", 5*time.Second); !ok {
				t.Fatal("no marker notification")
			}
			if _, ok := rec.waitKind(t, kind, 0); ok {
				t.Fatal("notification from a rolled back transaction")
			}
		})
	}
}

func TestConcurrentClaimsEachJobOnce(t *testing.T) {
	t.Parallel()
	const (
		jobs     = 20000
		claimers = 8
	)
	s, pool := newStorePool(t)
	ctx := ctxT(t)
	kinds := []string{"a", "b", "c"}
	ps := make([]store.InsertParams, jobs)
	for i := range ps {
		ps[i] = job(kinds[i%len(kinds)])
		ps[i].Priority = store.Priorities[i%3]
	}
	for i := 0; i < jobs; i += 5000 {
		if _, err := s.Insert(ctx, ps[i:i+5000]); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		claimed = make(map[uuid.UUID]int, jobs)
		total   atomic.Int64
		wg      sync.WaitGroup
	)
	errs := make(chan error, claimers)
	for w := range claimers {
		wg.Go(func() {
			cp := &store.ClaimParams{Owner: "node" + string(rune('0'+w)), Limit: 100, LeaseDuration: time.Minute}
			for _, k := range kinds {
				cp.Kinds = append(cp.Kinds, store.KindLimit{Kind: k, Limit: 50})
			}
			for total.Load() < jobs {
				res, err := s.Claim(ctx, cp)
				if err != nil {
					errs <- err
					return
				}
				var fin []store.FinishParams
				mu.Lock()
				for _, j := range res.Jobs {
					claimed[j.ID]++
					fin = append(fin, store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeSucceeded})
				}
				mu.Unlock()
				total.Add(int64(len(res.Jobs)))
				if len(fin) == 0 {
					if res.NextRunAt.IsZero() {
						return
					}
					continue
				}
				ok, err := s.Finish(ctx, fin)
				if err != nil {
					errs <- err
					return
				}
				for i, o := range ok {
					if !o {
						errs <- errors.New("finish refused for " + fin[i].Lease.ID.String())
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(claimed) != jobs {
		t.Fatalf("claimed %d distinct jobs, want %d", len(claimed), jobs)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Fatalf("job %s claimed %d times", id, n)
		}
	}
	// Counted exactly: above 10,000 final jobs CountJobs estimates.
	var succeeded, other int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state <> 'succeeded')
		FROM ax.jobs_all`).Scan(&succeeded, &other); err != nil {
		t.Fatal(err)
	}
	if succeeded != jobs || other != 0 {
		t.Fatalf("%d succeeded and %d in other states, want %d and 0", succeeded, other, jobs)
	}
}

func TestClaimPriorityAndKindLimits(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ps []store.InsertParams
	add := func(kind string, prio int, age time.Duration) uuid.UUID {
		p := job(kind)
		p.Priority = prio
		p.RunAt = now.Add(-age)
		ps = append(ps, p)
		return p.ID
	}
	// Kind a: many old normal-priority jobs; kind b: newer ones; one high
	// priority b; one low-priority a; one future high-priority a.
	var aNormal []uuid.UUID
	for i := range 5 {
		aNormal = append(aNormal, add("a", store.PriorityNormal, time.Duration(100-i)*time.Minute))
	}
	bNormal := []uuid.UUID{add("b", store.PriorityNormal, 2*time.Minute), add("b", store.PriorityNormal, time.Minute)}
	bHigh := add("b", store.PriorityHigh, time.Second)
	add("a", store.PriorityLow, 1000*time.Minute)
	future := job("a")
	future.Priority = store.PriorityHigh
	future.RunAt = now.Add(time.Hour)
	ps = append(ps, future)
	if _, err := s.Insert(ctx, ps); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Owner: "n", Limit: 5, LeaseDuration: time.Minute,
		Kinds: []store.KindLimit{{Kind: "a", Limit: 2}, {Kind: "b", Limit: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []uuid.UUID{bHigh, aNormal[0], aNormal[1], bNormal[0], bNormal[1]}
	var got []uuid.UUID
	for _, j := range res.Jobs {
		got = append(got, j.ID)
	}
	if len(got) != len(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("claim order %v, want %v", got, want)
		}
	}
	// Left behind: three due normal a jobs (kind limit) and the low one,
	// the earliest of all.
	if want := ps[8].RunAt.Truncate(time.Microsecond); !res.NextRunAt.Equal(want) {
		t.Fatalf("NextRunAt %s, want %s", res.NextRunAt, want)
	}
}

func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := ctxT(t)
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := newRecorder()
	defer s.Subscribe(rec.record)()
	// Kill the listening backend: the only one of this database running LISTEN.
	var killed int
	err = pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&killed)
	if err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("killed %d listening backends, want 1", killed)
	}
	// The reconnect itself is announced: notifications may have been lost.
	if _, ok := rec.waitKind(t, "", 10*time.Second); !ok {
		t.Fatal("no re-check notification (empty kind) after the reconnect")
	}
	// Insert until a notification arrives through the new connection.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.Insert(ctx, []store.InsertParams{job("after.kill")}); err != nil {
			t.Fatal(err)
		}
		if _, ok := rec.waitKind(t, "after.kill", 100*time.Millisecond); ok {
			return
		}
	}
	t.Fatal("no notification after the listener's connection was killed")
}
