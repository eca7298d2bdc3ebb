package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newStore(t *testing.T) (*memstore.Store, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	st := memstore.New(memstore.WithClock(clk.Now))
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st, clk
}

func params(kind string) store.InsertParams {
	return store.InsertParams{
		ID:          uuid.Must(uuid.NewV7()),
		Kind:        kind,
		Payload:     []byte(`{}`),
		Priority:    store.PriorityNormal,
		MaxAttempts: 3,
	}
}

func insert(t *testing.T, st *memstore.Store, ps ...store.InsertParams) []store.InsertResult {
	t.Helper()
	res, err := st.Insert(context.Background(), ps)
	require.NoError(t, err)
	return res
}

func claim(t *testing.T, st *memstore.Store, limit int, kinds ...string) *store.ClaimResult {
	t.Helper()
	cp := &store.ClaimParams{Owner: "node-1", Limit: limit, LeaseDuration: time.Minute}
	for _, k := range kinds {
		cp.Kinds = append(cp.Kinds, store.KindLimit{Kind: k, Limit: limit})
	}
	res, err := st.Claim(context.Background(), cp)
	require.NoError(t, err)
	return res
}

func finish(t *testing.T, st *memstore.Store, j *store.JobRecord, out store.Outcome) {
	t.Helper()
	ok, err := st.Finish(context.Background(), []store.FinishParams{{
		Lease:   store.Lease{ID: j.ID, Token: j.LeaseToken},
		Outcome: out,
		Error:   "boom",
	}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
}

func TestClockDecidesDueness(t *testing.T) {
	tests := []struct {
		name      string
		advance   time.Duration
		wantClaim bool
	}{
		{"BeforeRunAt", 59 * time.Second, false},
		{"OneMicrosecondBefore", time.Minute - time.Microsecond, false},
		{"AtRunAt", time.Minute, true},
		{"AfterRunAt", time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, clk := newStore(t)
			p := params("k")
			p.Delay = time.Minute
			insert(t, st, p)
			runAt := clk.Now().Add(time.Minute)

			res := claim(t, st, 10, "k")
			require.Empty(t, res.Jobs)
			require.Equal(t, runAt, res.NextRunAt)
			require.Equal(t, clk.Now(), res.Now)

			clk.Add(tt.advance)
			res = claim(t, st, 10, "k")
			assert.Equal(t, tt.wantClaim, len(res.Jobs) == 1)
		})
	}
}

func TestClockStampsEveryTime(t *testing.T) {
	st, clk := newStore(t)
	ctx := context.Background()
	t0 := clk.Now()
	p := params("k")
	insert(t, st, p)

	clk.Add(time.Second)
	j := claim(t, st, 1, "k").Jobs[0]
	assert.Equal(t, t0, j.CreatedAt)
	assert.Equal(t, t0, j.RunAt)
	assert.Equal(t, t0.Add(time.Second), j.AttemptedAt)
	assert.Equal(t, t0.Add(time.Second+time.Minute), j.LeaseExpiresAt)

	clk.Add(time.Second)
	ext, err := st.ExtendLeases(ctx, &store.ExtendParams{
		Leases:   []store.Lease{{ID: j.ID, Token: j.LeaseToken}},
		Duration: time.Hour,
	})
	require.NoError(t, err)
	require.Empty(t, ext.Lost)
	got, err := st.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(2*time.Second+time.Hour), got.LeaseExpiresAt)

	clk.Add(time.Second)
	ok, err := st.Finish(ctx, []store.FinishParams{{
		Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeRetry,
		Delay: 10 * time.Second, Error: "boom",
	}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	got, err = st.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StateRetrying, got.State)
	assert.Equal(t, t0.Add(13*time.Second), got.RunAt)
	assert.Equal(t, []store.AttemptError{{Attempt: 1, At: t0.Add(3 * time.Second), Error: "boom", Node: "node-1", StartedAt: t0.Add(time.Second)}}, got.Errors)
	assert.True(t, got.LeaseExpiresAt.IsZero())
	assert.Equal(t, uuid.Nil, got.LeaseToken)
	assert.Equal(t, "node-1", got.Owner)
}

func TestClockTruncatedToMicroseconds(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 123456789, time.UTC)
	st := memstore.New(memstore.WithClock(func() time.Time { return now }))
	got, err := st.Now(context.Background())
	require.NoError(t, err)
	assert.Equal(t, time.Date(2030, 1, 1, 0, 0, 0, 123456000, time.UTC), got)
}

func TestRescueExpiredUsesStoreClock(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		requests    []store.ControlOp // made while the job runs
		advance     time.Duration
		wantN       int
		wantState   store.State
	}{
		{"LeaseStillValid", 2, nil, time.Minute, 0, store.StateRunning},
		{"ExpiredAttemptsLeft", 2, nil, time.Minute + time.Microsecond, 1, store.StateRetrying},
		{"ExpiredLastAttempt", 1, nil, time.Minute + time.Microsecond, 1, store.StateDead},
		{"ExpiredPauseRequested", 2, []store.ControlOp{store.OpPause}, time.Minute + time.Microsecond, 1, store.StatePaused},
		{"ExpiredLastAttemptPauseRequested", 1, []store.ControlOp{store.OpPause}, time.Minute + time.Microsecond, 1, store.StateDead},
		{"ExpiredBothRequested", 2, []store.ControlOp{store.OpPause, store.OpCancel}, time.Minute + time.Microsecond, 1, store.StateCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, clk := newStore(t)
			ctx := context.Background()
			p := params("k")
			p.MaxAttempts = tt.maxAttempts
			insert(t, st, p)
			claim(t, st, 1, "k")
			for _, op := range tt.requests {
				_, err := st.Control(ctx, p.ID, op)
				require.NoError(t, err)
			}

			clk.Add(tt.advance)
			rescued, err := st.RescueExpired(ctx, 10)
			require.NoError(t, err)
			assert.Len(t, rescued, tt.wantN)
			got, err := st.Get(ctx, p.ID)
			require.NoError(t, err)
			assert.Equal(t, tt.wantState, got.State)
			assert.Len(t, got.Errors, tt.wantN)
			for _, r := range rescued {
				assert.Equal(t, store.Rescued{ID: p.ID, Kind: "k", Owner: "node-1", Attempt: 1, State: tt.wantState}, r)
				assert.Equal(t, clk.Now(), got.Errors[0].At)
			}
		})
	}
}

// TestClaimOrderManyJobs inserts thousands of due jobs in random order and
// checks that successive claims return them by priority, run_at, then ID,
// and that NextRunAt always names the earliest job left.
func TestClaimOrderManyJobs(t *testing.T) {
	st, clk := newStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []string{"a", "b", "c"}
	const n = 5000
	ps := make([]store.InsertParams, n)
	for i := range ps {
		ps[i] = params(kinds[rng.IntN(len(kinds))])
		ps[i].ID = uuid.New() // random order, not time order
		ps[i].Priority = 1 + rng.IntN(3)
		// Few distinct run_ats, so ID breaks many ties.
		ps[i].RunAt = clk.Now().Add(-time.Duration(rng.IntN(50)) * time.Second)
	}
	for chunk := range slices.Chunk(ps, 700) {
		insert(t, st, chunk...)
	}
	want := slices.Clone(ps)
	slices.SortFunc(want, func(a, b store.InsertParams) int {
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return slices.Compare(a.ID[:], b.ID[:])
	})

	var got []uuid.UUID
	for len(got) < n {
		res := claim(t, st, 1+rng.IntN(97), kinds...)
		require.NotEmpty(t, res.Jobs)
		for _, j := range res.Jobs {
			got = append(got, j.ID)
		}
		if len(got) < n {
			left := want[len(got):]
			earliest := slices.MinFunc(left, func(a, b store.InsertParams) int { return a.RunAt.Compare(b.RunAt) })
			require.Equal(t, earliest.RunAt, res.NextRunAt)
		} else {
			require.True(t, res.NextRunAt.IsZero())
		}
	}
	wantIDs := make([]uuid.UUID, n)
	for i, p := range want {
		wantIDs[i] = p.ID
	}
	require.Equal(t, wantIDs, got)
}

func TestClaimLimits(t *testing.T) {
	tests := []struct {
		name  string
		kinds []store.KindLimit
		limit int
		want  map[string]int // claimed per kind
	}{
		{"TotalLimit", []store.KindLimit{{Kind: "a", Limit: 10}, {Kind: "b", Limit: 10}}, 3, map[string]int{"a": 3}},
		{"PriorityBeforeKindOrder", []store.KindLimit{{Kind: "b", Limit: 10}, {Kind: "a", Limit: 10}}, 5, map[string]int{"a": 4, "b": 1}},
		{"KindLimitThenNextKind", []store.KindLimit{{Kind: "a", Limit: 2}, {Kind: "b", Limit: 10}}, 5, map[string]int{"a": 2, "b": 3}},
		{"OnlyRequestedKinds", []store.KindLimit{{Kind: "b", Limit: 10}}, 100, map[string]int{"b": 4}},
		{"UnknownKind", []store.KindLimit{{Kind: "zzz", Limit: 10}}, 100, map[string]int{}},
		{"DuplicateKindKeepsFirst", []store.KindLimit{{Kind: "a", Limit: 1}, {Kind: "a", Limit: 5}}, 100, map[string]int{"a": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := newStore(t)
			for range 4 {
				pa, pb := params("a"), params("b")
				pa.Priority = store.PriorityHigh
				pb.Priority = store.PriorityLow
				insert(t, st, pa, pb)
			}
			res, err := st.Claim(context.Background(), &store.ClaimParams{
				Kinds: tt.kinds, Limit: tt.limit, LeaseDuration: time.Minute,
			})
			require.NoError(t, err)
			got := map[string]int{}
			for _, j := range res.Jobs {
				got[j.Kind]++
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestUniqueKeyRelease checks when a job holds its unique key, by scope,
// with the store's clock moved by hand.
func TestUniqueKeyRelease(t *testing.T) {
	ctx := context.Background()
	var (
		perKind  = store.UniqueScope{}
		finished = store.UniqueScope{Finished: true}
		hourly   = store.UniqueScope{Period: time.Hour}
	)
	succeed := func(t *testing.T, st *memstore.Store, _ *fakeClock, _ uuid.UUID) {
		finish(t, st, claim(t, st, 1, "k").Jobs[0], store.OutcomeSucceeded)
	}
	tests := []struct {
		name  string
		scope store.UniqueScope
		// end moves the first job holding "key" to some state.
		end           func(t *testing.T, st *memstore.Store, clk *fakeClock, id uuid.UUID)
		wantDuplicate bool
	}{
		{"Scheduled", perKind, func(*testing.T, *memstore.Store, *fakeClock, uuid.UUID) {}, true},
		{"Paused", perKind, func(t *testing.T, st *memstore.Store, _ *fakeClock, id uuid.UUID) {
			_, err := st.Control(ctx, id, store.OpPause)
			require.NoError(t, err)
		}, true},
		{"Succeeded", perKind, succeed, false},
		{"Dead", perKind, func(t *testing.T, st *memstore.Store, _ *fakeClock, id uuid.UUID) {
			finish(t, st, claim(t, st, 1, "k").Jobs[0], store.OutcomeDead)
		}, false},
		{"CancelledByControl", perKind, func(t *testing.T, st *memstore.Store, _ *fakeClock, id uuid.UUID) {
			_, err := st.Control(ctx, id, store.OpCancel)
			require.NoError(t, err)
		}, false},
		{"CancelledByFinish", perKind, func(t *testing.T, st *memstore.Store, _ *fakeClock, id uuid.UUID) {
			j := claim(t, st, 1, "k").Jobs[0]
			_, err := st.Control(ctx, id, store.OpCancel)
			require.NoError(t, err)
			finish(t, st, j, store.OutcomeRetry) // cancel requested: retry becomes cancelled
			got, err := st.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.StateCancelled, got.State)
		}, false},
		{"FinishedSucceeded", finished, succeed, true},
		{"FinishedSucceededAndPruned", finished, func(t *testing.T, st *memstore.Store, clk *fakeClock, id uuid.UUID) {
			succeed(t, st, clk, id)
			clk.Add(2 * time.Hour)
			n, err := st.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}, false},
		{"FinishedSucceededNotYetPrunable", finished, func(t *testing.T, st *memstore.Store, clk *fakeClock, id uuid.UUID) {
			succeed(t, st, clk, id)
			clk.Add(time.Hour)
			n, err := st.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
			require.NoError(t, err)
			require.Equal(t, 0, n)
		}, true},
		{"PeriodSucceededSameWindow", hourly, func(t *testing.T, st *memstore.Store, clk *fakeClock, id uuid.UUID) {
			succeed(t, st, clk, id)
			clk.Add(time.Hour - time.Second) // still in the window
		}, true},
		{"PeriodNextWindow", hourly, func(t *testing.T, st *memstore.Store, clk *fakeClock, id uuid.UUID) {
			clk.Add(time.Hour)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, clk := newStore(t)
			// Start on a whole hour, so that the hourly window is known.
			clk.Add(clk.Now().Truncate(time.Hour).Add(time.Hour).Sub(clk.Now()))
			first := params("k")
			first.UniqueKey, first.Unique = "key", tt.scope
			insert(t, st, first)
			tt.end(t, st, clk, first.ID)

			second := params("k")
			second.UniqueKey, second.Unique = "key", tt.scope
			res := insert(t, st, second)
			want := store.InsertResult{ID: second.ID}
			if tt.wantDuplicate {
				want = store.InsertResult{ID: first.ID, Duplicate: true}
			}
			assert.Equal(t, []store.InsertResult{want}, res)
		})
	}
}

func TestRunNowCancelledNeedsItsKey(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	first := params("k")
	first.UniqueKey = "key"
	insert(t, st, first)
	_, err := st.Control(ctx, first.ID, store.OpCancel)
	require.NoError(t, err)

	second := params("k")
	second.UniqueKey = "key"
	insert(t, st, second)
	_, err = st.Control(ctx, first.ID, store.OpRunNow)
	require.ErrorIs(t, err, store.ErrWrongState)
	got, err := st.Get(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, got.State)

	// Once the holder is cancelled too, the first job takes the key back.
	_, err = st.Control(ctx, second.ID, store.OpCancel)
	require.NoError(t, err)
	got, err = st.Control(ctx, first.ID, store.OpRunNow)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, got.State)
	res := insert(t, st, params("k"), func() store.InsertParams { p := params("k"); p.UniqueKey = "key"; return p }())
	require.Equal(t, store.InsertResult{ID: first.ID, Duplicate: true}, res[1])
}

func TestCountJobs(t *testing.T) {
	st, clk := newStore(t)
	ctx := context.Background()
	for range 3 {
		insert(t, st, params("a"))
	}
	future := params("b")
	future.Delay = time.Hour
	insert(t, st, future, params("b"))

	jobs := claim(t, st, 3, "a").Jobs
	require.Len(t, jobs, 3)
	finish(t, st, jobs[0], store.OutcomeSucceeded)
	finish(t, st, jobs[1], store.OutcomeRetry)
	_, err := st.Control(ctx, future.ID, store.OpPause)
	require.NoError(t, err)

	got, err := st.CountJobs(ctx)
	require.NoError(t, err)
	assert.Equal(t, []store.StateCount{
		{Kind: "a", State: store.StateRetrying, Count: 1},
		{Kind: "a", State: store.StateRunning, Count: 1},
		{Kind: "a", State: store.StateSucceeded, Count: 1},
		{Kind: "b", State: store.StateScheduled, Count: 1},
		{Kind: "b", State: store.StatePaused, Count: 1},
	}, got)

	clk.Add(time.Hour)
	_, err = st.Prune(ctx, &store.PruneParams{Retention: time.Minute, Limit: 10})
	require.NoError(t, err)
	got, err = st.CountJobs(ctx)
	require.NoError(t, err)
	assert.NotContains(t, got, store.StateCount{Kind: "a", State: store.StateSucceeded, Count: 1})
	assert.Len(t, got, 4)
}

func TestNotifications(t *testing.T) {
	st, clk := newStore(t)
	ctx := context.Background()
	var mu sync.Mutex
	var got []store.Notification
	unsubscribe := st.Subscribe(func(n store.Notification) {
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
	})
	take := func() []store.Notification {
		mu.Lock()
		defer mu.Unlock()
		g := got
		got = nil
		return g
	}
	now := clk.Now()

	a1, a2, b := params("a"), params("a"), params("b")
	a1.Delay, a2.Delay, b.Delay = time.Hour, time.Minute, time.Second
	insert(t, st, a1, a2, b)
	assert.Equal(t, []store.Notification{
		{Kind: "a", RunAt: now.Add(time.Minute)},
		{Kind: "b", RunAt: now.Add(time.Second)},
	}, take(), "one notification per kind, earliest run_at")

	insert(t, st, store.InsertParams{ID: uuid.New(), Kind: "a", Priority: 1, MaxAttempts: 1, UniqueKey: "u"})
	take()
	insert(t, st, store.InsertParams{ID: uuid.New(), Kind: "a", Priority: 1, MaxAttempts: 1, UniqueKey: "u"})
	assert.Empty(t, take(), "a duplicate inserts nothing")

	_, err := st.Control(ctx, a1.ID, store.OpPause)
	require.NoError(t, err)
	assert.Empty(t, take(), "pause makes nothing due")
	_, err = st.Control(ctx, a1.ID, store.OpRunNow)
	require.NoError(t, err)
	assert.Equal(t, []store.Notification{{Kind: "a", RunAt: now}}, take())

	unsubscribe()
	unsubscribe()
	insert(t, st, params("a"))
	assert.Empty(t, take())
}

func TestClose(t *testing.T) {
	st := memstore.New()
	ctx := context.Background()
	p := params("k")
	_, err := st.Insert(ctx, []store.InsertParams{p})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.NoError(t, st.Close())

	_, err = st.Get(ctx, p.ID)
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = st.Insert(ctx, []store.InsertParams{params("k")})
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = st.CountJobs(ctx)
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = st.Now(ctx)
	require.ErrorIs(t, err, store.ErrClosed)
	st.Subscribe(func(store.Notification) { t.Error("notified after close") })()
}

func TestListOrderAfterPruneAndRandomIDs(t *testing.T) {
	st, clk := newStore(t)
	ctx := context.Background()
	var ids []uuid.UUID
	for range 200 {
		p := params("k")
		p.ID = uuid.New()
		ids = append(ids, p.ID)
		insert(t, st, p)
	}
	// Finish and prune the first 50 claimed.
	for _, j := range claim(t, st, 50, "k").Jobs {
		finish(t, st, j, store.OutcomeSucceeded)
		ids = slices.DeleteFunc(ids, func(id uuid.UUID) bool { return id == j.ID })
	}
	clk.Add(time.Hour)
	n, err := st.Prune(ctx, &store.PruneParams{Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, 50, n)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })

	var got []uuid.UUID
	after := uuid.Nil
	for {
		page, err := st.List(ctx, &store.ListParams{After: after, Limit: 7})
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, j := range page {
			got = append(got, j.ID)
		}
		after = page[len(page)-1].ID
	}
	require.Equal(t, ids, got)
}

// TestConcurrentClaimers checks under -race that concurrent claimers never
// share a job and that every job is finished exactly once.
func TestConcurrentClaimers(t *testing.T) {
	st := memstore.New()
	ctx := context.Background()
	const n = 2000
	ps := make([]store.InsertParams, n)
	for i := range ps {
		ps[i] = params(fmt.Sprintf("k%d", i%3))
	}
	_, err := st.Insert(ctx, ps)
	require.NoError(t, err)

	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for {
				res, err := st.Claim(ctx, &store.ClaimParams{
					Owner: fmt.Sprint("w", w), Limit: 13, LeaseDuration: time.Minute,
					Kinds: []store.KindLimit{{Kind: "k0", Limit: 5}, {Kind: "k1", Limit: 5}, {Kind: "k2", Limit: 5}},
				})
				if !assert.NoError(t, err) || len(res.Jobs) == 0 {
					return
				}
				fps := make([]store.FinishParams, len(res.Jobs))
				for i, j := range res.Jobs {
					fps[i] = store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeSucceeded}
				}
				ok, err := st.Finish(ctx, fps)
				assert.NoError(t, err)
				mu.Lock()
				for i, j := range res.Jobs {
					assert.True(t, ok[i])
					seen[j.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, n)
	for id, c := range seen {
		require.Equal(t, 1, c, id)
	}
	counts, err := st.CountJobs(ctx)
	require.NoError(t, err)
	var total int64
	for _, c := range counts {
		require.Equal(t, store.StateSucceeded, c.State)
		total += c.Count
	}
	require.EqualValues(t, n, total)
}

func TestInsertRejectsWholeBatch(t *testing.T) {
	dupID := params("k")
	tests := []struct {
		name string
		bad  store.InsertParams
	}{
		{"InvalidPriority", func() store.InsertParams { p := params("k"); p.Priority = 9; return p }()},
		{"InvalidJSON", func() store.InsertParams { p := params("k"); p.Payload = []byte("{"); return p }()},
		{"IDTwiceInBatch", dupID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := newStore(t)
			_, err := st.Insert(context.Background(), []store.InsertParams{dupID, params("k"), tt.bad})
			require.ErrorIs(t, err, store.ErrInvalidParams)
			counts, err := st.CountJobs(context.Background())
			require.NoError(t, err)
			require.Empty(t, counts)
		})
	}
}
