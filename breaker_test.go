package ax_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// breakerLog is a memstore that records, in the order the store applied
// them, the claims of a kind and the breaker transitions: what a test
// replays to check that no job started while the breaker was open but
// the probes.
type breakerLog struct {
	*memstore.Store
	kind string

	mu      sync.Mutex // held across each recorded call: the log's order is the store's
	entries []breakerEntry
}

type breakerEntry struct {
	claimed     int // jobs of the kind a claim took
	transitions []store.BreakerTransition
	failed      int // failed outcomes of the kind a Finish applied
}

func (b *breakerLog) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.Store.Claim(ctx, p)
	if err == nil {
		e := breakerEntry{transitions: res.Breakers}
		for _, j := range res.Jobs {
			if j.Kind == b.kind {
				e.claimed++
			}
		}
		b.entries = append(b.entries, e)
	}
	return res, err
}

func (b *breakerLog) FinishFlow(ctx context.Context, ps []store.FinishParams) (*store.FinishResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.Store.FinishFlow(ctx, ps)
	if err == nil {
		e := breakerEntry{transitions: res.Breakers}
		for i, p := range ps {
			if res.OK[i] && (p.Outcome == store.OutcomeRetry || p.Outcome == store.OutcomeDead) {
				e.failed++
			}
		}
		b.entries = append(b.entries, e)
	}
	return res, err
}

func (b *breakerLog) log() []breakerEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]breakerEntry(nil), b.entries...)
}

// TestBreakerDownstreamRecovers: a downstream fails for 10s then
// recovers, jobs of its kind arriving all along on three hosts. The
// breaker opens after its threshold, the jobs started while it is open
// are only the probes (one per half-open), everything succeeds after the
// recovery and no job goes dead. Transitions are events, each emitted by
// one host.
func TestBreakerDownstreamRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &breakerLog{Store: memstore.New(), kind: "call"}
		var (
			down     atomic.Bool
			attempts atomic.Int64
			events   = newFlowEvents()
		)
		down.Store(true)
		cfg := ax.BreakerConfig{Failures: 5, CoolDown: time.Second, MaxCoolDown: 4 * time.Second}
		hosts := make([]*ax.Scheduler, 3)
		for i := range hosts {
			hosts[i] = newScheduler(t, st, quiet, func(c *ax.Config) {
				c.Node = fmt.Sprint("host-", i)
				c.Observers = []ax.Observer{events}
				c.MaxAttempts = 10
			})
			require.NoError(t, hosts[i].Handle("call", ax.HandlerFunc(func(context.Context, *ax.Job) error {
				attempts.Add(1)
				time.Sleep(5 * time.Millisecond)
				if down.Load() {
					return errors.New("downstream unavailable")
				}
				return nil
			}), ax.CircuitBreaker(cfg), ax.Retry(ax.ExponentialBackoff{Base: 100 * time.Millisecond, Max: time.Second})))
			start(t, hosts[i])
		}
		// 20 jobs a second for 15s.
		go func() {
			for range 150 {
				scheduleN(t, hosts[0], "call", 2)
				time.Sleep(100 * time.Millisecond)
			}
		}()
		time.Sleep(10 * time.Second)
		down.Store(false)
		time.Sleep(20 * time.Second)

		counts, err := st.CountJobs(t.Context())
		require.NoError(t, err)
		require.Equal(t, []store.StateCount{{Kind: "call", State: store.StateSucceeded, Count: 300}}, counts,
			"every job succeeded, none dead")

		// Replay the store's log.
		state, failures, probes, openStarts := store.BreakerClosed, 0, 0, 0
		opened := false
		for _, e := range st.log() {
			if state != store.BreakerClosed && e.claimed > 0 {
				openStarts += e.claimed
				halfOpens := 0
				for _, tr := range e.transitions {
					if tr.To == store.BreakerHalfOpen {
						halfOpens++
					}
				}
				require.True(t, e.claimed == 1 && (halfOpens == 1 || state == store.BreakerHalfOpen),
					"a claim took %d jobs while the breaker was %s", e.claimed, state)
				probes++
			}
			if !opened {
				failures += e.failed
			}
			for _, tr := range e.transitions {
				if tr.To == store.BreakerOpen && !opened {
					opened = true
					require.GreaterOrEqual(t, failures, cfg.Failures, "opened before its threshold")
				}
				state = tr.To
			}
		}
		require.True(t, opened)
		require.Equal(t, store.BreakerClosed, state, "closed after the recovery")
		require.Equal(t, probes, openStarts)
		t.Logf("%d attempts, %d probes while open", attempts.Load(), probes)
		// Cool-downs 1, 2, 4, 4s... over the 10s down: a handful of probes.
		require.LessOrEqual(t, probes, 6)

		// Each transition is an event, from one host.
		ev := events.kinds()
		require.Equal(t, ev[ax.EventBreakerHalfOpen], probes)
		require.Equal(t, ev[ax.EventBreakerOpened], probes, "the first opening, then one per failed probe but the last")
		require.Equal(t, 1, ev[ax.EventBreakerClosed])
	})
}

// flowEvents counts events by kind, from any number of Schedulers.
type flowEvents struct {
	mu sync.Mutex
	n  map[ax.EventKind]int
	ev []ax.Event
}

func newFlowEvents() *flowEvents { return &flowEvents{n: make(map[ax.EventKind]int)} }

func (l *flowEvents) Observe(e ax.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[e.Kind]++
	l.ev = append(l.ev, e)
}

func (l *flowEvents) kinds() map[ax.EventKind]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[ax.EventKind]int, len(l.n))
	for k, v := range l.n {
		out[k] = v
	}
	return out
}

func (l *flowEvents) of(kind ax.EventKind) []ax.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ax.Event
	for _, e := range l.ev {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestBreakerByHand: an operator opens a breaker from the Admin of a
// process that runs no jobs: no job of the kind starts, Stats and
// Admin.Kinds show it open; closing it from a Scheduler's Admin starts
// the jobs at once (no poll) and emits the event there.
func TestBreakerByHand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		events := newFlowEvents()
		s := newScheduler(t, st, quiet, func(c *ax.Config) { c.Observers = []ax.Observer{events} })
		var ran atomic.Int64
		require.NoError(t, s.Handle("call", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			ran.Add(1)
			return nil
		}), ax.CircuitBreaker(ax.BreakerConfig{CoolDown: time.Hour})))
		start(t, s)
		ctx := t.Context()
		operator := newAdmin(t, st)

		f, err := operator.OpenBreaker(ctx, "call")
		require.NoError(t, err)
		require.Equal(t, ax.BreakerOpen, f.Breaker.State)
		scheduleN(t, s, "call", 3)
		time.Sleep(time.Minute)
		require.Zero(t, ran.Load(), "a job started while the breaker was open")

		stats, err := s.Stats(ctx)
		require.NoError(t, err)
		require.True(t, stats.FlowsKnown)
		require.Equal(t, ax.BreakerOpen, stats.Flows["call"].Breaker.State)
		kinds, err := operator.Kinds(ctx)
		require.NoError(t, err)
		require.Len(t, kinds, 1)
		require.NotNil(t, kinds[0].Flow)
		require.Equal(t, ax.BreakerOpen, kinds[0].Flow.Breaker.State)

		f, err = s.Admin().CloseBreaker(ctx, "call")
		require.NoError(t, err)
		require.Equal(t, ax.BreakerClosed, f.Breaker.State)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		require.EqualValues(t, 3, ran.Load(), "closing started the jobs at once")
		closed := events.of(ax.EventBreakerClosed)
		require.Len(t, closed, 1)
		require.Equal(t, "call", closed[0].JobKind)
		require.Equal(t, "closed by hand", closed[0].Reason)
		require.Empty(t, events.of(ax.EventBreakerOpened), "opened by another process's Admin: no event here")

		_, err = operator.OpenBreaker(ctx, "nobreaker")
		require.ErrorIs(t, err, ax.ErrNotFound)
		_, err = operator.OpenBreaker(ctx, "")
		require.ErrorIs(t, err, ax.ErrInvalidKind)
	})
}

// TestBreakerProbeStartsAtCoolDownEnd: with no poll, the probe starts when
// the cool-down ends (the claim's NextRunAt wakes the host), and the
// jobs held by the breaker start as soon as the probe succeeds (the
// store's notification).
func TestBreakerProbeStartsAtCoolDownEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		events := newFlowEvents()
		s := newScheduler(t, st, quiet, func(c *ax.Config) { c.Observers = []ax.Observer{events} })
		var (
			mu     sync.Mutex
			starts []time.Time
			fail   atomic.Bool
		)
		fail.Store(true)
		require.NoError(t, s.Handle("call", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			if fail.Load() {
				return errors.New("down")
			}
			return nil
		}), ax.CircuitBreaker(ax.BreakerConfig{Failures: 1, CoolDown: 300 * time.Millisecond}),
			ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return time.Hour }))))
		start(t, s)
		_, err := s.Schedule(t.Context(), "call", nil)
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
		fail.Store(false)
		scheduleN(t, s, "call", 3)
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, starts, 4)
		opened := events.of(ax.EventBreakerOpened)
		require.Len(t, opened, 1)
		probe := starts[1].Sub(opened[0].At)
		require.GreaterOrEqual(t, probe, 300*time.Millisecond)
		require.LessOrEqual(t, probe, 302*time.Millisecond, "the probe started %s after the opening", probe)
		for _, s := range starts[2:] {
			require.LessOrEqual(t, s.Sub(starts[1]), 15*time.Millisecond, "held jobs started when the probe succeeded")
		}
	})
}

// TestBreakerThresholdStopsNextStart: a breaker with Failures: 3 on a
// kind that runs one job at a time, whose handler always fails, lets
// exactly three attempts start: the third failure opens it before the
// host starts a fourth (issue 23, item 12). Before the fix the host freed
// the slot as soon as an outcome was queued, claimed the next job before
// the failure was written, and 4 to 7 attempts started.
func TestBreakerThresholdStopsNextStart(t *testing.T) {
	tests := []struct {
		name  string
		flush time.Duration // Config.FlushInterval: how long outcomes gather
	}{
		{"DefaultFlush", 0},
		{"SlowFlush", 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memstore.New()
				events := newFlowEvents()
				s := newScheduler(t, st, quiet, func(c *ax.Config) {
					c.Observers = []ax.Observer{events}
					c.FlushInterval = tt.flush
				})
				var started atomic.Int64
				require.NoError(t, s.Handle("call", ax.HandlerFunc(func(context.Context, *ax.Job) error {
					started.Add(1)
					return errors.New("down")
				}), ax.Concurrency(1), ax.Retry(noDelay),
					ax.CircuitBreaker(ax.BreakerConfig{Failures: 3, CoolDown: time.Hour})))
				start(t, s)
				scheduleN(t, s, "call", 10)
				time.Sleep(time.Minute)
				synctest.Wait()
				require.Len(t, events.of(ax.EventBreakerOpened), 1)
				require.EqualValues(t, 3, started.Load(), "attempts started with Failures: 3 and one job at a time")
				f, err := s.Admin().Flows(t.Context())
				require.NoError(t, err)
				require.Len(t, f, 1)
				require.Equal(t, ax.BreakerOpen, f[0].Breaker.State)
			})
		})
	}
}
