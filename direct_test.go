package ax_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// claimedIDs records the IDs of jobs that claims returned.
type claimedIDs struct {
	mu  sync.Mutex
	ids map[uuid.UUID]bool
}

func watchClaims(fs *ax.FaultStore) *claimedIDs {
	c := &claimedIDs{ids: map[uuid.UUID]bool{}}
	fs.SetAfterClaim(func(res *store.ClaimResult) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, j := range res.Jobs {
			c.ids[j.ID] = true
		}
	})
	return c
}

func (c *claimedIDs) has(id uuid.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[id]
}

// TestDirectStart: Schedule of a due job on a host with free workers
// inserts it claimed and runs it; no claim takes it.
func TestDirectStart(t *testing.T) {
	fs := ax.NewFaultStore(newMemstore())
	claims := watchClaims(fs)
	started := newEventCounter(ax.EventStarted)
	s := newScheduler(t, fs, func(c *ax.Config) { c.Node = "direct-host"; c.Observers = []ax.Observer{started} })
	ran := make(chan *ax.Job, 1)
	require.NoError(t, s.Handle("direct", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		ran <- j
		return nil
	})))
	start(t, s)

	res, err := s.Schedule(context.Background(), "direct", nil)
	require.NoError(t, err)
	j := recv(t, ran)
	require.Equal(t, res.ID, j.ID)
	require.Equal(t, 1, j.Attempt)
	require.Zero(t, j.ClaimLag(), "claimed as it was inserted: no claim lag")
	rec := waitState(t, fs, res.ID, store.StateSucceeded)
	require.Equal(t, "direct-host", rec.Owner)
	require.False(t, claims.has(res.ID), "a claim took the job: it was not started directly")
	require.EqualValues(t, 1, fs.Calls("InsertClaimed"))
	require.Zero(t, fs.Calls("Insert"))
	started.waitFor(t, 1)
}

// TestDirectStartDeclines: jobs that must wait for a claim (not due, a
// kind whose flow settings decide, no free worker, direct start off, a
// kind this host does not handle) are inserted unclaimed and still run.
func TestDirectStartDeclines(t *testing.T) {
	tests := []struct {
		name    string
		cfg     func(*ax.Config)
		flows   []store.FlowConfig // declared in the store by another host
		sched   []ax.ScheduleOption
		busy    bool // a first job holds the only worker until the second is scheduled
		handled bool // the kind has a handler on a second Scheduler only
	}{
		{name: "not due", sched: []ax.ScheduleOption{ax.In(30 * time.Millisecond)}},
		{name: "disabled", cfg: func(c *ax.Config) { c.DisableDirectStart = true }},
		{name: "flow limit declared elsewhere", flows: []store.FlowConfig{{Kind: "k", Concurrency: 5}}},
		{name: "no free worker", cfg: func(c *ax.Config) { c.Workers = 1 }, busy: true},
		{name: "kind handled elsewhere", handled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := newMemstore()
			if tc.flows != nil {
				require.NoError(t, ms.SetFlows(context.Background(), &store.SetFlowsParams{Node: "elsewhere", Flows: tc.flows}))
			}
			fs := ax.NewFaultStore(ms)
			claims := watchClaims(fs)
			edits := []func(*ax.Config){}
			if tc.cfg != nil {
				edits = append(edits, tc.cfg)
			}
			s := newScheduler(t, fs, edits...)
			worker := s
			if tc.handled {
				worker = newScheduler(t, fs)
			}
			release := make(chan struct{})
			var holding atomic.Bool
			require.NoError(t, worker.Handle("k", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
				if string(j.Payload) == `"hold"` {
					holding.Store(true)
					<-release
				}
				return nil
			})))
			if tc.handled {
				start(t, worker)
			}
			start(t, s)
			if tc.busy {
				first, err := s.Schedule(context.Background(), "k", "hold")
				require.NoError(t, err)
				require.Eventually(t, holding.Load, 10*time.Second, time.Millisecond)
				defer waitState(t, fs, first.ID, store.StateSucceeded)
			}
			res, err := s.Schedule(context.Background(), "k", "go", tc.sched...)
			require.NoError(t, err)
			close(release)
			waitState(t, fs, res.ID, store.StateSucceeded)
			require.True(t, claims.has(res.ID), "the job did not wait for a claim")
		})
	}
}

// TestDirectStartWaitsForClaimInFlight: a claim in flight holds every
// free slot it asked for, so a Schedule call meanwhile inserts its job
// unclaimed, and the job runs once a claim takes it.
func TestDirectStartWaitsForClaimInFlight(t *testing.T) {
	fs := ax.NewFaultStore(newMemstore())
	claims := watchClaims(fs)
	inClaim, unblock := make(chan struct{}), make(chan struct{})
	var blocked atomic.Bool
	fs.SetBeforeCall(func(ctx context.Context, method string) error {
		if method == "Claim" && blocked.CompareAndSwap(false, true) {
			close(inClaim)
			select {
			case <-unblock:
			case <-ctx.Done():
			}
		}
		return nil
	})
	s := newScheduler(t, fs, func(c *ax.Config) { c.Workers = 8 })
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
	start(t, s)
	recv(t, inClaim) // the first claim round, held
	res, err := s.Schedule(context.Background(), "k", nil)
	require.NoError(t, err)
	rec, err := fs.Get(context.Background(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, rec.State, "started directly while a claim held every free slot")
	close(unblock)
	waitState(t, fs, res.ID, store.StateSucceeded)
	require.True(t, claims.has(res.ID))
}

// TestDirectStartAfterClaimInFlight: a Schedule call that meets a claim
// in flight waits for it to end and then starts its job directly, instead
// of inserting it for yet another claim (under load that kept direct
// starts off for good: each insert woke the claimer, and the next
// Schedule met that claim in flight); and a job stamped At(time.Now())
// starts directly although claims whose answers came back late make the
// store's clock look behind the host's.
func TestDirectStartAfterClaimInFlight(t *testing.T) {
	tests := []struct {
		name string
		// The claims take before and after around the store's reading
		// of its clock; Schedule is called at.
		before, after, at time.Duration
		at0               bool // with At(time.Now())
	}{
		{name: "claim in flight", before: 10 * time.Millisecond, at: 5 * time.Millisecond},
		{name: "At(time.Now()) with the store's clock looking behind", after: 20 * time.Millisecond, at: 30 * time.Millisecond, at0: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := ax.NewFaultStore(newMemstore())
				claims := watchClaims(fs)
				fs.SetBeforeCall(func(_ context.Context, method string) error {
					if method == "Claim" {
						time.Sleep(tc.before)
					}
					return nil
				})
				inner := fs.AfterClaim
				fs.SetAfterClaim(func(res *store.ClaimResult) {
					inner(res)
					time.Sleep(tc.after)
				})
				s := newScheduler(t, fs, func(c *ax.Config) { c.PollInterval = time.Hour })
				ran := make(chan *ax.Job, 1)
				require.NoError(t, s.Handle("k", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
					ran <- j
					return nil
				})))
				start(t, s)
				time.Sleep(tc.at)
				var opts []ax.ScheduleOption
				if tc.at0 {
					opts = append(opts, ax.At(time.Now()))
				}
				res, err := s.Schedule(t.Context(), "k", nil, opts...)
				require.NoError(t, err)
				require.Equal(t, res.ID, recv(t, ran).ID)
				waitState(t, fs, res.ID, store.StateSucceeded)
				require.False(t, claims.has(res.ID), "a claim took the job: it was not started directly")
				require.EqualValues(t, 1, fs.Calls("InsertClaimed"))
			})
		})
	}
}

// TestDirectStartKeepsLimits: Schedule calls while a claim is in flight
// start jobs directly only on slots the claim did not ask for, so that
// the two never run more handlers than Workers, or than a kind's
// Concurrency. (Checked by removing the claim's reservation by hand: the
// test then failed, with up to 8 handlers on 4 workers.)
func TestDirectStartKeepsLimits(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		opts    []ax.HandlerOption
		limit   int
	}{
		{name: "workers", workers: 4, limit: 4},
		{name: "kind concurrency", workers: 8, opts: []ax.HandlerOption{ax.Concurrency(2)}, limit: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := ax.NewFaultStore(newMemstore())
			inClaim, unblock := make(chan struct{}), make(chan struct{})
			var blocked atomic.Bool
			fs.SetBeforeCall(func(ctx context.Context, method string) error {
				if method == "Claim" && blocked.CompareAndSwap(false, true) {
					close(inClaim)
					<-unblock
				}
				return nil
			})
			s := newScheduler(t, fs, func(c *ax.Config) { c.Workers = tc.workers })
			var running, peak atomic.Int64
			release := make(chan struct{})
			n := 2 * tc.limit
			done := make(chan struct{}, n)
			require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error {
				r := running.Add(1)
				for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
				}
				<-release
				running.Add(-1)
				done <- struct{}{}
				return nil
			}), tc.opts...))
			start(t, s)
			recv(t, inClaim) // the first claim round, held while jobs are scheduled
			for range n {
				_, err := s.Schedule(context.Background(), "k", nil)
				require.NoError(t, err)
			}
			close(unblock)
			require.Eventually(t, func() bool { return running.Load() >= int64(tc.limit) }, 10*time.Second, time.Millisecond)
			time.Sleep(20 * time.Millisecond) // a handler over the limit would have started by now
			require.EqualValues(t, tc.limit, peak.Load(), "handlers running at once")
			close(release)
			for range n {
				recv(t, done)
			}
		})
	}
}

// TestStopWaitsForDirectStart: Stop waits for a Schedule call that is
// starting its job directly, and for that job's handler. Schedule is
// called once the start-up claim ended: it used to meet that claim in
// flight now and then and insert its job for a claim, so no direct start
// came and the test timed out (a Schedule now waits for a claim in
// flight, up to a bound a slow -race run could pass).
func TestStopWaitsForDirectStart(t *testing.T) {
	fs := ax.NewFaultStore(newMemstore())
	claimed := make(chan struct{})
	var once sync.Once
	fs.SetAfterClaim(func(*store.ClaimResult) { once.Do(func() { close(claimed) }) })
	s := newScheduler(t, fs, func(c *ax.Config) { c.PollInterval = time.Hour })
	ran := make(chan struct{}, 1)
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran <- struct{}{}
		return nil
	})))
	start(t, s)
	recv(t, claimed)
	entered, release := holdInsertClaimed(fs)
	scheduled := make(chan error, 1)
	var id uuid.UUID
	go func() {
		res, err := s.Schedule(context.Background(), "k", nil)
		id = res.ID
		scheduled <- err
	}()
	recv(t, entered)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- s.Stop(ctx)
	}()
	time.Sleep(20 * time.Millisecond) // Stop is waiting (or about to)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a direct start was in flight", err)
	default:
	}
	close(release)
	require.NoError(t, recv(t, scheduled))
	recv(t, ran)
	require.NoError(t, recv(t, stopped))
	waitState(t, fs, id, store.StateSucceeded)
}

// TestStopHandsBackLateDirectStart: a direct start whose store call
// outlives Stop's deadline does not run its job after Stop gave up
// waiting: the job is handed back, unstarted, for any host to run.
func TestStopHandsBackLateDirectStart(t *testing.T) {
	fs := ax.NewFaultStore(newMemstore())
	s := newScheduler(t, fs)
	var ran atomic.Bool
	require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		ran.Store(true)
		return nil
	})))
	start(t, s)
	entered, release := holdInsertClaimed(fs)
	scheduled := scheduleAsync(s, "k")
	recv(t, entered)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Stop(ctx)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "Stop: %v", err)
	close(release)
	r := recv(t, scheduled)
	require.NoError(t, r.err)
	rec := waitState(t, fs, r.res.ID, store.StateScheduled)
	require.False(t, ran.Load(), "the handler ran after Stop returned")
	require.Zero(t, rec.Attempt, "a handed-back attempt is not counted")
}

// scheduleOutcome is what a Schedule call returned.
type scheduleOutcome struct {
	res ax.ScheduleResult
	err error
}

// scheduleAsync schedules a job of kind on another goroutine and sends
// what Schedule returned.
func scheduleAsync(s *ax.Scheduler, kind string) <-chan scheduleOutcome {
	ch := make(chan scheduleOutcome, 1)
	go func() {
		res, err := s.Schedule(context.Background(), kind, nil)
		ch <- scheduleOutcome{res, err}
	}()
	return ch
}

// holdInsertClaimed makes fs's next InsertClaimed call close entered and
// wait until release is closed.
func holdInsertClaimed(fs *ax.FaultStore) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	fs.SetBeforeCall(func(_ context.Context, method string) error {
		if method == "InsertClaimed" {
			close(entered)
			<-release
		}
		return nil
	})
	return entered, release
}

// earlyStartStore is a memstore whose InsertClaimed hands a claimed job
// over through store.InsertClaim.EarlyStart and then waits, as pgstore
// does under WithEarlyDirectStart while its insert is flushed, until
// flushed is closed; it then fails with flushErr, if set.
type earlyStartStore struct {
	*memstore.Store
	flushed  chan struct{}
	flushErr error
}

func (s *earlyStartStore) InsertClaimed(ctx context.Context, p *store.InsertParams, c *store.InsertClaim) (store.InsertResult, *store.JobRecord, error) {
	res, rec, err := s.Store.InsertClaimed(ctx, p, c)
	if err != nil || rec == nil || c.EarlyStart == nil {
		return res, rec, err
	}
	c.EarlyStart.StartEarly(rec)
	select {
	case <-s.flushed:
	case <-ctx.Done():
		return store.InsertResult{}, nil, ctx.Err()
	}
	if s.flushErr != nil {
		return store.InsertResult{}, nil, s.flushErr
	}
	return res, rec, nil
}

// TestDirectStartEarly: a store that hands a direct start's job over
// before its insert is durable has the job start then, while Schedule
// still waits for the store; when that wait fails, Schedule reports the
// error and the job, already started, still runs to its end. Either way
// the reserved worker slot is used once: with one worker, two jobs
// scheduled after never run together and both run.
func TestDirectStartEarly(t *testing.T) {
	errFlush := errors.New("flush failed")
	for _, flushErr := range []error{nil, errFlush} {
		name := "Flushed"
		if flushErr != nil {
			name = "FlushFails"
		}
		t.Run(name, func(t *testing.T) {
			es := &earlyStartStore{Store: newMemstore(), flushed: make(chan struct{}), flushErr: flushErr}
			s := newScheduler(t, es, func(c *ax.Config) { c.Workers = 1; c.PollInterval = time.Hour })
			ran := make(chan uuid.UUID, 3)
			var running, most atomic.Int32
			gate := make(chan struct{}, 3) // a handler ends on a token
			require.NoError(t, s.Handle("k", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				ran <- j.ID
				<-gate
				return nil
			})))
			start(t, s)

			scheduled := scheduleAsync(s, "k")
			id := recv(t, ran) // started while the store still waits
			select {
			case r := <-scheduled:
				t.Fatalf("Schedule returned (%v) before the store's wait ended", r.err)
			default:
			}
			close(es.flushed)
			r := recv(t, scheduled)
			if flushErr != nil {
				require.ErrorIs(t, r.err, errFlush)
				es.flushErr = nil // the next calls' waits succeed
			} else {
				require.NoError(t, r.err)
				require.Equal(t, id, r.res.ID)
			}
			gate <- struct{}{}
			waitState(t, es, id, store.StateSucceeded)
			require.Eventually(t, func() bool { return len(s.Running()) == 0 }, 5*time.Second, time.Millisecond)

			for range 2 {
				_, err := s.Schedule(context.Background(), "k", nil)
				require.NoError(t, err)
			}
			recv(t, ran)
			// A slot given back twice would let the second start now.
			time.Sleep(50 * time.Millisecond)
			gate <- struct{}{}
			recv(t, ran)
			gate <- struct{}{}
			require.EqualValues(t, 1, most.Load(), "two handlers ran together on one worker")
		})
	}
}
