package ax

import (
	"context"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestAheadRoom: how many jobs a claim takes beyond its free slots.
func TestAheadRoom(t *testing.T) {
	cases := []struct {
		name            string
		workers, wait   int
		backlog         bool
		claim, handlers time.Duration
		want            int
	}{
		{"short handlers", 25, 0, true, 10 * time.Millisecond, 10 * time.Microsecond, 375},
		{"some wait already", 25, 30, true, 10 * time.Millisecond, 10 * time.Microsecond, 345},
		{"more wait than the room", 25, 380, true, 10 * time.Millisecond, 10 * time.Microsecond, 0},
		{"handlers that drain a hold of 200", 25, 0, true, 10 * time.Millisecond, 250 * time.Microsecond, 175},
		{"handlers too long to hold more than 100", 25, 0, true, 10 * time.Millisecond, time.Millisecond, 75},
		{"as many as start within a claim", 25, 0, true, 10 * time.Millisecond, 5 * time.Millisecond, 50},
		{"less those that wait", 25, 20, true, 10 * time.Millisecond, 5 * time.Millisecond, 30},
		{"handlers longer than a claim", 25, 0, true, 10 * time.Millisecond, 300 * time.Millisecond, 0},
		{"no backlog", 25, 0, false, 10 * time.Millisecond, 10 * time.Microsecond, 0},
		{"no claim measured", 25, 0, true, 0, 10 * time.Microsecond, 0},
		{"no handler measured", 25, 0, true, 10 * time.Millisecond, 0, 0},
		{"few workers", 5, 0, true, 10 * time.Millisecond, 10 * time.Microsecond, 395},
		{"few workers, handlers of 100 µs", 5, 0, true, 10 * time.Millisecond, 100 * time.Microsecond, 95},
		{"half the default", 50, 0, true, 10 * time.Millisecond, 10 * time.Microsecond, 350},
		{"half the default, handlers of 1 ms", 50, 0, true, 10 * time.Millisecond, time.Millisecond, 50},
		{"the default width", 100, 0, true, 10 * time.Millisecond, 10 * time.Microsecond, 300},
		{"the default width, some wait", 100, 120, true, 10 * time.Millisecond, 10 * time.Microsecond, 180},
		{"the default width, handlers of a claim's time", 100, 40, true, 10 * time.Millisecond, 10 * time.Millisecond, 60},
		{"wider", 300, 0, true, 10 * time.Millisecond, 10 * time.Microsecond, 100},
		{"as wide as the largest claim", maxAheadClaim, 0, true, 10 * time.Millisecond, 10 * time.Microsecond, 0},
		{"widest", 1000, 0, true, 10 * time.Millisecond, 10 * time.Microsecond, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, aheadRoom(c.workers, c.wait, c.backlog, c.claim, c.handlers))
		})
	}
}

// TestAheadCap: a host of fewer than minAheadClaim workers holds more
// than minAheadClaim jobs only while its workers start them all within
// aheadDrain; from minAheadClaim workers up it holds maxAheadClaim.
func TestAheadCap(t *testing.T) {
	cases := []struct {
		name     string
		workers  int
		handlers time.Duration
		want     int
	}{
		{"no handler measured", 25, 0, minAheadClaim},
		{"handlers of 1 ms", 25, time.Millisecond, minAheadClaim},
		{"handlers of 500 µs: 25 start 100 in 2 ms", 25, 500 * time.Microsecond, minAheadClaim},
		{"handlers of 250 µs: 25 start 200 in 2 ms", 25, 250 * time.Microsecond, 200},
		{"handlers of 10 µs", 25, 10 * time.Microsecond, maxAheadClaim},
		{"one worker, handlers of 5 µs", 1, 5 * time.Microsecond, maxAheadClaim},
		{"one worker, handlers of 10 µs", 1, 10 * time.Microsecond, 200},
		{"the default width, long handlers", 100, time.Second, maxAheadClaim},
		{"wider", 1000, 0, maxAheadClaim},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, aheadCap(c.workers, c.handlers))
		})
	}
}

// claimLimits records the Limit of each claim a FaultStore was asked for,
// each claim taking claimTook.
type claimLimits struct {
	mu     sync.Mutex
	limits []int
	got    []int // jobs each claim took
}

func (c *claimLimits) store(st store.Store, claimTook time.Duration) *FaultStore {
	f := NewFaultStore(st)
	f.SetBeforeCall(func(_ context.Context, method string) error {
		if method == "Claim" {
			time.Sleep(claimTook)
		}
		return nil
	})
	return f
}

func (c *claimLimits) hook(st *FaultStore) *limitStore { return &limitStore{FaultStore: st, c: c} }

// limitStore is a FaultStore that records claims' limits.
type limitStore struct {
	*FaultStore
	c *claimLimits
}

func (l *limitStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	res, err := l.FaultStore.Claim(ctx, p)
	l.c.mu.Lock()
	l.c.limits = append(l.c.limits, p.Limit)
	if res != nil {
		l.c.got = append(l.c.got, len(res.Jobs))
	}
	l.c.mu.Unlock()
	return res, err
}

// TestAheadWaitLimit: a job taken ahead waits ten claims' time for a
// slot before it is handed back, and at least minAheadWait.
func TestAheadWaitLimit(t *testing.T) {
	cases := []struct {
		name      string
		claimTook time.Duration
		want      time.Duration
	}{
		{"no claim measured", 0, minAheadWait},
		{"short claims", 5 * time.Millisecond, minAheadWait},
		{"at the floor", 25 * time.Millisecond, minAheadWait},
		{"slow claims", 80 * time.Millisecond, 800 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, aheadWaitLimit(c.claimTook))
		})
	}
}

// TestClaimerTakesAheadOfItsSlots: a host of 5 workers whose claims take
// 10 ms and handlers 1 ms, with 300 jobs due: after its first claim, it
// claims more jobs than it has free slots, up to 55 at once (5 slots and
// as many as they start in 10 ms), never runs more than 5 handlers at
// once, and runs every job once, in a third of the 60 claims it would
// make without. With handlers of 100 ms it never takes more than its
// free slots. A host of the default 100 workers takes up to
// maxAheadClaim at once, and runs 3,000 jobs in two thirds of the 30
// claims it would make without.
func TestClaimerTakesAheadOfItsSlots(t *testing.T) {
	cases := []struct {
		name            string
		workers         int
		handler         time.Duration
		jobs            int
		leastMost, most int // bounds of the largest claim limit
		claims          int // at most this many claims
	}{
		{"short handlers", 5, time.Millisecond, 300, 6, 55, 20},
		{"long handlers", 5, 100 * time.Millisecond, 30, 1, 5, 30},
		{"very short handlers", 25, 20 * time.Microsecond, 6000, minAheadClaim + 1, maxAheadClaim, 40},
		{"the default width", 100, time.Millisecond, 3000, 101, maxAheadClaim, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memstore.New()
				cl := &claimLimits{}
				ls := cl.hook(cl.store(st, 10*time.Millisecond))
				r := testRuntime(t, ls, func(cfg *Config) { cfg.Workers = c.workers; cfg.PollInterval = time.Hour })
				var (
					mu            sync.Mutex
					running, most int
					ran           = map[uuid.UUID]int{}
				)
				require.NoError(t, r.s.Handle("k", HandlerFunc(func(_ context.Context, j *Job) error {
					mu.Lock()
					running++
					most = max(most, running)
					ran[j.ID]++
					mu.Unlock()
					time.Sleep(c.handler)
					mu.Lock()
					running--
					mu.Unlock()
					return nil
				})))
				for range c.jobs {
					insertAt(t, st, "k", time.Time{})
				}
				startClaimer(t, r)
				r.wake()
				time.Sleep(time.Duration(c.jobs)*c.handler + 5*time.Second)
				synctest.Wait()

				mu.Lock()
				defer mu.Unlock()
				require.Len(t, ran, c.jobs)
				for id, n := range ran {
					require.Equal(t, 1, n, "job %s ran %d times", id, n)
				}
				require.LessOrEqual(t, most, c.workers, "handlers at once")
				cl.mu.Lock()
				defer cl.mu.Unlock()
				t.Logf("claim limits: %v; jobs: %v", cl.limits, cl.got)
				require.GreaterOrEqual(t, maxOf(cl.limits), c.leastMost, "the largest claim")
				require.LessOrEqual(t, maxOf(cl.limits), c.most, "the largest claim")
				require.LessOrEqual(t, len(cl.limits), c.claims, "claims")
				r.mu.Lock()
				defer r.mu.Unlock()
				require.Equal(t, c.workers, r.free, "free slots at the end")
				require.Empty(t, r.waiting)
			})
		})
	}
}

func maxOf(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// TestJobTakenAheadEnds: a job waiting for a slot on a host of one
// worker, whose handler blocks, ends without its handler when it is
// cancelled, its lease is lost, or it waits too long (handed back to the
// store, due and its attempt not counted), and the slot count stays
// right; one that gets the slot runs.
func TestJobTakenAheadEnds(t *testing.T) {
	cases := []struct {
		name       string
		end        func(r *runtime, a *attempt)
		wantRan    bool
		handedBack bool
	}{
		{"cancelled", func(r *runtime, a *attempt) { r.cancelLocal(a.job.ID, ErrJobCancelled) }, false, false},
		{"lease lost", func(r *runtime, a *attempt) {
			r.mu.Lock()
			a.lost = true
			r.mu.Unlock()
			a.cancel(ErrLeaseLost)
		}, false, false},
		{"gets the slot", func(*runtime, *attempt) {}, true, false},
		{"not yet too long", func(r *runtime, _ *attempt) {
			time.Sleep(minAheadWait - time.Millisecond)
			r.handBackStaleAhead()
		}, true, false},
		{"waited too long", func(r *runtime, _ *attempt) {
			time.Sleep(minAheadWait)
			r.handBackStaleAhead()
		}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memstore.New()
				r := testRuntime(t, st, func(c *Config) { c.Workers = 1 })
				release := make(chan struct{})
				ran := map[uuid.UUID]bool{}
				var mu sync.Mutex
				require.NoError(t, r.s.Handle("k", HandlerFunc(func(_ context.Context, j *Job) error {
					mu.Lock()
					ran[j.ID] = true
					mu.Unlock()
					<-release
					return nil
				})))
				go r.completer.run()
				defer r.completer.stop(context.Background(), context.Background())
				for range 2 {
					insertAt(t, st, "k", time.Time{})
				}
				res, err := st.Claim(context.Background(), &store.ClaimParams{Owner: "n", Limit: 2, LeaseDuration: time.Minute,
					Kinds: []store.KindLimit{{Kind: "k", Limit: 2}}})
				require.NoError(t, err)
				require.Len(t, res.Jobs, 2)
				for _, rec := range res.Jobs {
					r.launch(rec, time.Now(), time.Time{})
				}
				synctest.Wait()
				r.mu.Lock()
				require.Equal(t, 0, r.free)
				require.Equal(t, 2, r.busy["k"])
				require.Len(t, r.waiting, 1)
				waiter := r.waiting[0]
				r.mu.Unlock()
				require.Equal(t, map[string]int{"k": 1}, r.running(), "Running counts the handler, not the job that waits")

				c.end(r, waiter)
				synctest.Wait()
				rec, err := st.Get(context.Background(), waiter.job.ID)
				require.NoError(t, err)
				if c.handedBack {
					require.Equal(t, store.StateScheduled, rec.State, "handed back: due for any host")
					require.Zero(t, rec.Attempt, "handed back unstarted: the attempt is not counted")
				} else if c.wantRan {
					require.Equal(t, store.StateRunning, rec.State)
				}
				close(release)
				r.handlers.Wait()

				mu.Lock()
				require.True(t, ran[res.Jobs[0].ID] || ran[res.Jobs[1].ID])
				require.Equal(t, c.wantRan, ran[waiter.job.ID], "the waiting job's handler ran")
				mu.Unlock()
				r.mu.Lock()
				defer r.mu.Unlock()
				require.Equal(t, 1, r.free, "free slots at the end")
				require.Zero(t, r.busy["k"])
				require.Empty(t, r.waiting)
			})
		})
	}
}

// TestClaimerHandsBackJobsWhenHandlersTurnSlow: a host of 5 workers takes
// jobs ahead while its handlers are short; then its handlers hang. The
// jobs it took ahead are handed back within aheadWaitLimit of their
// claim, unstarted and their attempts not counted, it takes no more
// ahead, and a second host runs them while the first one's handlers
// still hang. Every job runs once.
func TestClaimerHandsBackJobsWhenHandlersTurnSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		cl := &claimLimits{}
		a := testRuntime(t, cl.hook(cl.store(st, 10*time.Millisecond)), func(cfg *Config) {
			cfg.Node, cfg.Workers, cfg.PollInterval = "a", 5, time.Hour
		})
		b := testRuntime(t, st, func(cfg *Config) { cfg.Node, cfg.Workers, cfg.PollInterval = "b", 20, time.Hour })
		const fast, jobs = 100, 300
		var (
			mu      sync.Mutex
			ran     = map[uuid.UUID]int{}
			onA     int
			release = make(chan struct{})
		)
		count := func(j *Job) int {
			mu.Lock()
			defer mu.Unlock()
			ran[j.ID]++
			return len(ran)
		}
		require.NoError(t, a.s.Handle("k", HandlerFunc(func(_ context.Context, j *Job) error {
			count(j)
			mu.Lock()
			onA++
			hang := onA > fast
			mu.Unlock()
			if hang {
				<-release
			} else {
				time.Sleep(time.Millisecond)
			}
			return nil
		})))
		require.NoError(t, b.s.Handle("k", HandlerFunc(func(_ context.Context, j *Job) error {
			count(j)
			time.Sleep(time.Millisecond)
			return nil
		})))
		for range jobs {
			insertAt(t, st, "k", time.Time{})
		}
		defer close(release) // before the claimers stop (Cleanup)
		startClaimer(t, a)
		t.Cleanup(func() {
			// Before the claimer stops (cleanups run last first): should
			// a check fail with jobs still waiting on a, end them, as
			// Stop would, so that the test fails rather than hangs.
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, at := range a.waiting {
				at.cancel(ErrStopping)
			}
		})
		a.wake()
		time.Sleep(time.Second)
		synctest.Wait()

		// Read under the locks, checked after (a failed check must not
		// leave a lock held for the cleanups).
		a.mu.Lock()
		waiting, free := len(a.waiting), a.free
		a.mu.Unlock()
		mu.Lock()
		started := onA
		mu.Unlock()
		cl.mu.Lock()
		largest, claims := maxOf(cl.limits), len(cl.limits)
		cl.mu.Unlock()
		require.Zero(t, waiting, "the jobs taken ahead are handed back")
		require.Zero(t, free)
		require.Equal(t, fast+5, started, "host a started its short handlers and the 5 that hang, no more")
		require.Greater(t, largest, 5, "host a took jobs ahead")
		held, err := st.List(context.Background(), &store.ListParams{States: []store.State{store.StateRunning}, Limit: jobs})
		require.NoError(t, err)
		require.Len(t, held, 5, "host a holds only the jobs whose handlers hang")
		for _, rec := range held {
			require.Equal(t, "a", rec.Owner)
		}

		startClaimer(t, b)
		b.wake()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		mu.Lock()
		runs := maps.Clone(ran)
		mu.Unlock()
		cl.mu.Lock()
		claimsAfter := len(cl.limits)
		cl.mu.Unlock()
		require.Len(t, runs, jobs, "host b ran what host a handed back while its handlers hang")
		for id, n := range runs {
			require.Equal(t, 1, n, "job %s ran %d times", id, n)
		}
		require.Equal(t, claims, claimsAfter, "host a, its slots full and its handlers slow, claims nothing more")
	})
}
