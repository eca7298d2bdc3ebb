package ax

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// claimTimes records when a FaultStore was asked to claim.
type claimTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (c *claimTimes) hook(_ context.Context, method string) error {
	if method == "Claim" {
		c.mu.Lock()
		c.at = append(c.at, time.Now())
		c.mu.Unlock()
	}
	return nil
}

func (c *claimTimes) since(t0 time.Time) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Duration, len(c.at))
	for i, at := range c.at {
		out[i] = at.Sub(t0)
	}
	return out
}

// startClaimer starts the claim loop, the wake-ups and the completer of r
// (no heartbeat, maintenance or cluster), and stops them at the end of the
// test.
func startClaimer(t *testing.T, r *runtime, kinds ...string) {
	t.Helper()
	for _, k := range kinds {
		require.NoError(t, r.s.Handle(k, HandlerFunc(func(context.Context, *Job) error { return nil })))
	}
	r.wakeups.start()
	r.holds.start()
	r.loops.Add(1)
	go func() {
		defer r.loops.Done()
		r.claimLoop()
	}()
	go r.completer.run()
	t.Cleanup(func() {
		close(r.quit)
		r.loops.Wait()
		r.wakeups.stop()
		r.handlers.Wait()
		r.holds.stop()
		r.completer.stop(context.Background(), context.Background())
	})
}

func insertAt(t *testing.T, st store.Store, kind string, runAt time.Time) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	_, err := st.Insert(context.Background(), []store.InsertParams{{ID: id, Kind: kind, Payload: []byte(`{}`),
		Priority: store.PriorityNormal, MaxAttempts: 3, RunAt: runAt}})
	require.NoError(t, err)
	return id
}

// TestClaimerWakesAtNextRunAt: a claim round learns from the store when
// the next job is due, and the wheel wakes the claimer then, not at the
// next poll: a little ahead of it (within its claim window, ClaimParams.
// Ahead), and the handler starts at the job's run_at exactly.
func TestClaimerWakesAtNextRunAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var claims claimTimes
		fs.SetBeforeCall(claims.hook)
		r := testRuntime(t, fs, func(c *Config) { c.PollInterval = time.Hour })
		t0 := time.Now()
		runAt := t0.Add(100 * time.Millisecond)
		id := insertAt(t, fs, "k", runAt)
		started := make(chan time.Time, 1)
		require.NoError(t, r.s.Handle("k", HandlerFunc(func(context.Context, *Job) error {
			started <- time.Now()
			return nil
		})))
		startClaimer(t, r)
		r.wake()
		time.Sleep(time.Second)
		synctest.Wait()
		got := claims.since(t0)
		require.Len(t, got, 2, "claims: %v", got)
		require.Zero(t, got[0])
		ahead := claimAhead(0)
		require.GreaterOrEqual(t, got[1], 100*time.Millisecond-ahead, "claimed before its window")
		require.Less(t, got[1], 100*time.Millisecond, "claimed only once due")
		require.Zero(t, (<-started).Sub(runAt), "the handler starts at the job's run_at")
		rec, err := fs.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, store.StateSucceeded, rec.State)
		require.True(t, rec.AttemptedAt.Equal(rec.RunAt), "AttemptedAt %s, RunAt %s", rec.AttemptedAt, rec.RunAt)
	})
}

// TestClaimerStartsHeldJobAtRunAtDespiteSlowAnswer: a claim whose answer
// comes back late (here 30 ms after the store read its clock) does not
// hold its jobs that much longer: the start is reckoned from the tightest
// bound on the store's clock the recent claims gave (an earlier claim
// answered at once), so the handler starts at the job's run_at exactly.
// A slow first claim widens the window so that the job is claimed ahead.
func TestClaimerStartsHeldJobAtRunAtDespiteSlowAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var claims atomic.Int32
		fs.SetBeforeCall(func(_ context.Context, method string) error {
			if method == "Claim" && claims.Add(1) == 1 {
				time.Sleep(30 * time.Millisecond) // slow before the store reads its clock
			}
			return nil
		})
		fs.SetAfterClaim(func(res *store.ClaimResult) {
			if len(res.Jobs) > 0 {
				time.Sleep(30 * time.Millisecond) // slow after it
			}
		})
		r := testRuntime(t, fs, func(c *Config) { c.PollInterval = time.Hour })
		t0 := time.Now()
		runAt := t0.Add(300 * time.Millisecond)
		insertAt(t, fs, "k", runAt)
		started := make(chan time.Time, 1)
		require.NoError(t, r.s.Handle("k", HandlerFunc(func(context.Context, *Job) error {
			started <- time.Now()
			return nil
		})))
		startClaimer(t, r)
		r.wake()
		time.Sleep(time.Second)
		synctest.Wait()
		require.GreaterOrEqual(t, claims.Load(), int32(2))
		require.Zero(t, (<-started).Sub(runAt), "the handler starts at the job's run_at")
	})
}

// TestClaimerDropsJobCancelledWhileHeld: a job claimed ahead of its
// run_at and cancelled before it never reaches its handler, and is
// written cancelled.
func TestClaimerDropsJobCancelledWhileHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		r := testRuntime(t, fs, func(c *Config) { c.PollInterval = time.Hour })
		t0 := time.Now()
		id := insertAt(t, fs, "k", t0.Add(100*time.Millisecond))
		var calls atomic.Int32
		require.NoError(t, r.s.Handle("k", HandlerFunc(func(context.Context, *Job) error {
			calls.Add(1)
			return nil
		})))
		startClaimer(t, r)
		r.wake()
		time.Sleep(100*time.Millisecond - time.Microsecond) // claimed, not yet started
		synctest.Wait()
		rec, err := fs.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, store.StateRunning, rec.State, "claimed ahead")
		r.cancelLocal(id, ErrJobCancelled)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Zero(t, calls.Load(), "the handler ran")
		rec, err = fs.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, store.StateCancelled, rec.State)
	})
}

// TestClaimAhead: the claim window is several times the slowest recent
// claim, within its bounds; recentMax keeps the largest value of the last
// recentSeconds seconds, negative ones too; the next claim is timed to
// find the next job inside its window, or at its run_at without one.
func TestClaimAhead(t *testing.T) {
	windows := []struct {
		slowest, want time.Duration
	}{
		{0, minClaimAhead},
		{100 * time.Microsecond, minClaimAhead},
		{4 * time.Millisecond, 12 * time.Millisecond},
		{time.Second, maxClaimAhead},
	}
	for _, c := range windows {
		require.Equal(t, c.want, claimAhead(c.slowest), "slowest claim %s", c.slowest)
	}

	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	type add struct {
		at time.Duration // after t0
		v  time.Duration
	}
	recent := []struct {
		name  string
		adds  []add
		at    time.Duration
		want  time.Duration
		found bool
	}{
		{"none", nil, 0, 0, false},
		{"largest of the same second", []add{{0, 2 * ms}, {100 * ms, 9 * ms}, {900 * ms, ms}}, time.Second, 9 * ms, true},
		{"largest across seconds", []add{{0, 9 * ms}, {3 * time.Second, 2 * ms}}, 5 * time.Second, 9 * ms, true},
		{"forgotten after recentSeconds", []add{{0, 9 * ms}, {3 * time.Second, 2 * ms}}, recentSeconds * time.Second, 2 * ms, true},
		{"all forgotten", []add{{0, 9 * ms}}, 2 * recentSeconds * time.Second, 0, false},
		{"a bucket reused by a later second starts afresh", []add{{0, 9 * ms}, {recentSeconds * time.Second, 2 * ms}}, recentSeconds * time.Second, 2 * ms, true},
		{"negative values", []add{{0, -5 * ms}, {time.Second, -3 * ms}}, 2 * time.Second, -3 * ms, true},
	}
	for _, c := range recent {
		t.Run(c.name, func(t *testing.T) {
			var m recentMax
			for _, a := range c.adds {
				m.add(t0.Add(a.at), a.v)
			}
			got, found := m.get(t0.Add(c.at))
			require.Equal(t, c.found, found)
			require.Equal(t, c.want, got)
		})
	}

	before := time.Unix(1000, 0)
	hostNow := before.Add(time.Millisecond)
	next := []struct {
		delta, ahead time.Duration
		want         time.Time
	}{
		{10 * time.Millisecond, 0, hostNow.Add(10 * time.Millisecond)},
		{10 * time.Millisecond, 8 * time.Millisecond, before.Add(12 * time.Millisecond)},
		{0, 8 * time.Millisecond, before.Add(2 * time.Millisecond)},
	}
	for _, c := range next {
		require.Equal(t, c.want, nextClaimAt(before, hostNow, c.delta, c.ahead), "delta %s, ahead %s", c.delta, c.ahead)
	}
}

// TestStartLag: a due attempt's lag is its start minus its run time on
// the host clock, negative if the offset estimate says so; a held one's
// is never negative and at least the time since its release was due.
func TestStartLag(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	cases := []struct {
		name                  string
		start, runAt, startAt time.Time
		want                  time.Duration
	}{
		{"due, late", t0.Add(3 * ms), t0, time.Time{}, 3 * ms},
		{"due, estimate says early", t0, t0.Add(ms), time.Time{}, -ms},
		{"held, estimate says early", t0.Add(ms), t0.Add(2 * ms), t0.Add(ms), 0},
		{"held, released late", t0.Add(5 * ms), t0.Add(2 * ms), t0.Add(4 * ms), 3 * ms},
		{"held, estimate says later than the release", t0.Add(5 * ms), t0.Add(4 * ms), t0.Add(2 * ms), 3 * ms},
	}
	for _, c := range cases {
		require.Equal(t, c.want, startLag(c.start, c.runAt, c.startAt), c.name)
	}
}

// TestClaimerBacksOffAfterFailures: failed claims are retried after 20ms,
// 40ms, 80ms... (doubling from 10ms), at most every PollInterval; a
// success resets the backoff.
func TestClaimerBacksOffAfterFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var claims claimTimes
		fails := 5
		var mu sync.Mutex
		fs.SetBeforeCall(func(ctx context.Context, m string) error {
			_ = claims.hook(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			if m == "Claim" && fails > 0 {
				fails--
				return errors.New("connection refused")
			}
			return nil
		})
		r := testRuntime(t, fs, func(c *Config) { c.PollInterval = 200 * time.Millisecond })
		t0 := time.Now()
		startClaimer(t, r, "k")
		r.wake()
		time.Sleep(time.Second)
		synctest.Wait()
		got := claims.since(t0)
		want := []time.Duration{0, 20, 60, 140, 300, 500} // gaps 20, 40, 80, 160, then capped at 200
		for i := range want {
			want[i] *= time.Millisecond
		}
		require.GreaterOrEqual(t, len(got), len(want))
		require.Equal(t, want, got[:len(want)])
		// After the success, the poll interval again.
		require.Equal(t, 700*time.Millisecond, got[6])
	})
}

// TestClaimerHonoursConcurrency: a kind's Concurrency caps its claims, and
// a freed slot of a capped kind wakes the claimer at once, even with
// other kinds registered (whose empty claims say nothing of the capped
// kind).
func TestClaimerHonoursConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		r := testRuntime(t, st, func(c *Config) { c.PollInterval = time.Hour })
		release := make(chan struct{})
		var running, most int
		var mu sync.Mutex
		require.NoError(t, r.s.Handle("capped", HandlerFunc(func(context.Context, *Job) error {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}), Concurrency(2)))
		for range 6 {
			insertAt(t, st, "capped", time.Time{})
		}
		startClaimer(t, r, "other")
		r.wake()
		synctest.Wait()
		require.Equal(t, 2, most)
		for range 3 {
			release <- struct{}{}
			release <- struct{}{}
			synctest.Wait()
		}
		require.Equal(t, 2, most)
		time.Sleep(10 * time.Millisecond) // the last outcomes' flush interval
		synctest.Wait()
		counts, err := st.CountJobs(t.Context())
		require.NoError(t, err)
		require.Equal(t, []store.StateCount{{Kind: "capped", State: store.StateSucceeded, Count: 6}}, counts)
	})
}

// TestClaimWindowsShareJobsDueAhead: two hosts on one store, one whose
// claims take 30 ms (its handlers hold its pool, say) and one whose claims
// are instant, and a job due every 10 ms. The slow host's window is wide
// and the fast one's narrow, so left alone the slow host claims every job
// before the fast one's window reaches it. Losing those races widens the
// fast host's window, and then it takes its share: most of the jobs, since
// with equal windows the race goes to whichever claim reaches the store
// first (in 300 runs it took 190-285 of 300, and 1 without the fix). No
// job starts early or late either way.
func TestClaimWindowsShareJobsDueAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		slow, fast := NewFaultStore(st), NewFaultStore(st)
		slow.SetBeforeCall(func(_ context.Context, method string) error {
			if method == "Claim" {
				time.Sleep(30 * time.Millisecond)
			}
			return nil
		})
		t0 := time.Now()
		const n = 300
		for i := range n {
			insertAt(t, st, "k", t0.Add(100*time.Millisecond+time.Duration(i)*10*time.Millisecond))
		}
		var mu sync.Mutex
		ran := map[string]int{}
		var lags []time.Duration
		for _, h := range []struct {
			node string
			st   store.Store
		}{{"slow", slow}, {"fast", fast}} {
			r := testRuntime(t, h.st, func(c *Config) { c.Node = h.node; c.PollInterval = time.Hour })
			require.NoError(t, r.s.Handle("k", HandlerFunc(func(_ context.Context, j *Job) error {
				mu.Lock()
				defer mu.Unlock()
				ran[h.node]++
				lags = append(lags, time.Since(j.RunAt))
				return nil
			})))
			startClaimer(t, r)
			r.wake()
		}
		time.Sleep(n*10*time.Millisecond + time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		t.Logf("ran %v", ran)
		require.Equal(t, n, ran["slow"]+ran["fast"], "ran %v", ran)
		require.GreaterOrEqual(t, ran["fast"], n/4, "ran %v: the fast host was starved", ran)
		for _, lag := range lags {
			require.Zero(t, lag, "a job started off its run_at")
		}
	})
}

// TestLostRace: which claims tell that another host took the job the
// claim was woken for.
func TestLostRace(t *testing.T) {
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	expect := now.Add(20 * time.Millisecond)
	job := func(runAt time.Time) *store.JobRecord { return &store.JobRecord{RunAt: runAt} }
	cases := []struct {
		name   string
		expect time.Time
		res    store.ClaimResult
		lost   bool
	}{
		{"no job was expected", time.Time{}, store.ClaimResult{Now: now, Ahead: 50 * time.Millisecond}, false},
		{"the job is beyond this claim's window", expect, store.ClaimResult{Now: now, Ahead: 10 * time.Millisecond}, false},
		{"the job is still there (slots, or locked by a claim in flight)", expect,
			store.ClaimResult{Now: now, Ahead: 50 * time.Millisecond, NextRunAt: expect}, false},
		{"this claim took it", expect,
			store.ClaimResult{Now: now, Ahead: 50 * time.Millisecond, Jobs: []*store.JobRecord{job(expect)}}, false},
		{"gone, nothing left", expect, store.ClaimResult{Now: now, Ahead: 50 * time.Millisecond}, true},
		{"gone, later jobs left", expect,
			store.ClaimResult{Now: now, Ahead: 50 * time.Millisecond, NextRunAt: expect.Add(time.Second)}, true},
		{"gone, this claim took later ones", expect,
			store.ClaimResult{Now: now, Ahead: 50 * time.Millisecond, Jobs: []*store.JobRecord{job(expect.Add(10 * time.Millisecond))}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.lost, lostRace(tc.expect, &tc.res))
		})
	}
}

// TestDesignStatesTheClaimWindow: docs/DESIGN.md describes the claim
// window with the constants above; this fails when they drift apart.
func TestDesignStatesTheClaimWindow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "DESIGN.md"))
	require.NoError(t, err)
	doc := strings.Join(strings.Fields(string(b)), " ")
	for _, want := range []string{
		fmt.Sprintf("its window, %d× the host's slowest claim of the last %d s (%d–%d ms)",
			claimAheadTimes, recentSeconds, minClaimAhead.Milliseconds(), maxClaimAhead.Milliseconds()),
		fmt.Sprintf("claims with the widest window for the next %d s", recentSeconds),
	} {
		require.Contains(t, doc, want)
	}
}
