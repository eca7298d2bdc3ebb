package ax_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// overlap tracks handlers running at once, from the handlers' own start
// and end.
type overlap struct {
	mu        sync.Mutex
	cur, peak int
	starts    []time.Time
	ends      int
}

func (o *overlap) start() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cur++
	o.peak = max(o.peak, o.cur)
	o.starts = append(o.starts, time.Now())
}

func (o *overlap) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cur--
	o.ends++
}

func (o *overlap) read() (peak, ends int, starts []time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.peak, o.ends, slices.Clone(o.starts)
}

// quiet configures a test Scheduler: no logs, a poll so slow that every
// start must come from a wake-up (a claim's NextRunAt or a store
// notification), never from polling.
func quiet(c *ax.Config) {
	c.Logger = zap.NewNop()
	c.PollInterval = time.Hour
}

// TestGlobalConcurrencyAcrossSchedulers: three Schedulers on one store, a
// kind limited to 5 running cluster-wide, 500 jobs of 50ms: never more
// than 5 handlers at once, the limit reached, all done in about 500 ×
// 50ms / 5 (slots freed on one host are taken at once, through the
// store's notification, not a poll).
func TestGlobalConcurrencyAcrossSchedulers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		var o overlap
		hosts := make([]*ax.Scheduler, 3)
		for i := range hosts {
			hosts[i] = newScheduler(t, st, quiet, func(c *ax.Config) { c.Node = fmt.Sprint("host-", i) })
			require.NoError(t, hosts[i].Handle("limited", ax.HandlerFunc(func(context.Context, *ax.Job) error {
				o.start()
				defer o.end()
				time.Sleep(50 * time.Millisecond)
				return nil
			}), ax.GlobalConcurrency(5)))
		}
		for _, h := range hosts {
			start(t, h)
		}
		begin := time.Now()
		scheduleN(t, hosts[0], "limited", 500)
		for {
			time.Sleep(100 * time.Millisecond)
			if _, ends, _ := o.read(); ends == 500 {
				break
			}
		}
		took := time.Since(begin)
		peak, _, _ := o.read()
		t.Logf("500 jobs of 50ms, 5 at once: %s", took)
		require.Equal(t, 5, peak, "handlers running at once")
		require.Less(t, took, 500*50*time.Millisecond/5+time.Second, "slots were left idle")
	})
}

// TestGlobalConcurrencySlotsOfDeadHost: a host holding every slot of a
// limited kind dies (its store calls fail from then on); the other hosts
// take the slots over once its leases expire and one of them rescues the
// jobs: within LeaseDuration + 1.2 × RescueInterval (plus a heartbeat).
func TestGlobalConcurrencySlotsOfDeadHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		const lease, rescue = time.Second, 200 * time.Millisecond
		timing := func(c *ax.Config) { c.LeaseDuration, c.RescueInterval = lease, rescue }
		var o overlap
		work := ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
			o.start()
			defer o.end()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Second):
				return nil
			}
		})
		// The doomed host: through a FaultStore, which has no flow control
		// of its own, so it declares nothing; the store still counts its
		// jobs against the limit the others declared.
		fs := ax.NewFaultStore(st)
		doomed := newScheduler(t, fs, quiet, timing, func(c *ax.Config) { c.Node = "doomed" })
		require.NoError(t, doomed.Handle("limited", work))
		good := make([]*ax.Scheduler, 2)
		for i := range good {
			good[i] = newScheduler(t, st, quiet, timing, func(c *ax.Config) { c.Node = fmt.Sprint("good-", i) })
			require.NoError(t, good[i].Handle("limited", work, ax.GlobalConcurrency(3)))
			start(t, good[i])
		}
		// The good hosts are running: the limit is stored. The doomed host
		// takes every slot.
		for _, h := range good {
			require.NoError(t, h.Stop(t.Context()))
		}
		start(t, doomed)
		scheduleN(t, doomed, "limited", 6)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		peak, _, _ := o.read()
		require.Equal(t, 3, peak)
		for i := range good {
			good[i] = newScheduler(t, st, quiet, timing, func(c *ax.Config) { c.Node = fmt.Sprint("good-again-", i) })
			require.NoError(t, good[i].Handle("limited", work, ax.GlobalConcurrency(3)))
			start(t, good[i])
		}
		time.Sleep(500 * time.Millisecond)
		_, _, starts := o.read()
		require.Len(t, starts, 3, "the good hosts started nothing while the slots were held")

		killed := time.Now()
		fs.Down.Store(true)
		for {
			time.Sleep(10 * time.Millisecond)
			if _, _, starts = o.read(); len(starts) >= 6 {
				break
			}
		}
		freed := starts[3].Sub(killed)
		t.Logf("slots freed %s after the host died (lease %s, rescue interval %s)", freed, lease, rescue)
		require.LessOrEqual(t, freed, lease+rescue*6/5+lease/3, "slots freed %s after the host died", freed)
		peak, _, _ = o.read()
		require.LessOrEqual(t, peak, 6, "the dead host's handlers end once its leases are lost")
	})
}

// TestRateLimitAcrossSchedulers: three Schedulers, 100 starts a second
// for 10 seconds: no window of one second (sliding, in store time) holds
// more than 100 starts, the total is within 5% of 1,000, and jobs start
// when tokens arrive, with no poll.
func TestRateLimitAcrossSchedulers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		var (
			mu     sync.Mutex
			starts []time.Time // store clock, at the claim
		)
		hosts := make([]*ax.Scheduler, 3)
		for i := range hosts {
			hosts[i] = newScheduler(t, st, quiet, func(c *ax.Config) { c.Node = fmt.Sprint("host-", i) })
			require.NoError(t, hosts[i].Handle("rated", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
				mu.Lock()
				starts = append(starts, j.StartedAt)
				mu.Unlock()
				return nil
			}), ax.RateLimit(100, time.Second)))
			start(t, hosts[i])
		}
		scheduleN(t, hosts[0], "rated", 3000)
		begin := time.Now()
		time.Sleep(10 * time.Second)
		mu.Lock()
		window := slices.Clone(starts)
		mu.Unlock()
		slices.SortFunc(window, time.Time.Compare)
		for i := range window {
			n := 0
			for _, s := range window[i:] {
				if !s.Before(window[i].Add(time.Second)) {
					break
				}
				n++
			}
			require.LessOrEqual(t, n, 100, "starts in the second from %s", window[i].Sub(begin))
		}
		t.Logf("%d starts in 10s", len(window))
		require.InDelta(t, 1000, len(window), 50, "starts in 10s")
	})
}

// TestSequentialAcrossSchedulers: three Schedulers, 100 jobs on 5 keys:
// per key the runs never overlap and follow the scheduled order.
func TestSequentialAcrossSchedulers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		type run struct {
			seq        int
			start, end time.Time
		}
		var (
			mu   sync.Mutex
			runs = make(map[string][]run)
			done atomic.Int64
		)
		hosts := make([]*ax.Scheduler, 3)
		for i := range hosts {
			hosts[i] = newScheduler(t, st, quiet, func(c *ax.Config) { c.Node = fmt.Sprint("host-", i) })
			require.NoError(t, ax.Handle(hosts[i], "seq", func(_ context.Context, j *ax.Job, p struct{ N int }) error {
				begin := time.Now()
				time.Sleep(time.Duration(1+p.N%7) * time.Millisecond)
				mu.Lock()
				runs[j.SequenceKey] = append(runs[j.SequenceKey], run{seq: p.N, start: begin, end: time.Now()})
				mu.Unlock()
				done.Add(1)
				return nil
			}))
			start(t, hosts[i])
		}
		base := time.Now()
		reqs := make([]ax.Request, 100)
		for n := range reqs {
			// Scheduled order: by N. Inserted in reverse, all due.
			m := len(reqs) - 1 - n
			reqs[n] = ax.Request{Kind: "seq", Payload: struct{ N int }{m}, Options: []ax.ScheduleOption{
				ax.Sequential(fmt.Sprint("key-", m%5)), ax.At(base.Add(time.Duration(m-200) * time.Millisecond)),
			}}
		}
		_, err := hosts[1].ScheduleMany(t.Context(), reqs)
		require.NoError(t, err)
		for done.Load() < 100 {
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, runs, 5)
		for key, rs := range runs {
			require.Len(t, rs, 20, key)
			for i := 1; i < len(rs); i++ {
				require.Greater(t, rs[i].seq, rs[i-1].seq, "key %s: scheduled order", key)
				require.False(t, rs[i].start.Before(rs[i-1].end), "key %s: run %d began before run %d ended", key, rs[i].seq, rs[i-1].seq)
			}
		}
	})
}

// TestPriorityAgingUnderFlood: High jobs arrive continuously, more than
// the workers can run; one Low job due among them starts within its bound
// with PriorityAging, and not at all while the flood lasts without it.
func TestPriorityAgingUnderFlood(t *testing.T) {
	for _, tt := range []struct {
		name   string
		aging  time.Duration
		starts bool
	}{
		{"Aging", 500 * time.Millisecond, true},
		{"Strict", ax.NoPriorityAging, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memstore.New()
				s := newScheduler(t, st, quiet, func(c *ax.Config) {
					c.Workers = 10
					c.PriorityAging = tt.aging
				})
				var lowStarted atomic.Int64 // nanoseconds after begin, +1
				begin := time.Now()
				require.NoError(t, s.Handle("flood", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
					if j.Priority == ax.Low {
						lowStarted.Store(int64(time.Since(begin)) + 1)
					}
					time.Sleep(10 * time.Millisecond) // 1,000 jobs/s at most
					return nil
				})))
				start(t, s)
				// 10k High jobs over 5s: 2,000/s, twice what the workers run.
				ctx := t.Context()
				flood := make(chan struct{})
				go func() {
					defer close(flood)
					for range 500 {
						scheduleHigh(t, ctx, s, 20)
						time.Sleep(10 * time.Millisecond)
					}
				}()
				time.Sleep(50 * time.Millisecond)
				lowAt := time.Since(begin)
				_, err := s.Schedule(ctx, "flood", nil, ax.Priority(ax.Low))
				require.NoError(t, err)
				<-flood
				got := lowStarted.Load()
				if !tt.starts {
					require.Zero(t, got, "a Low job started during the flood with strict priorities")
					return
				}
				require.NotZero(t, got, "the Low job never started")
				waited := time.Duration(got-1) - lowAt
				t.Logf("the Low job waited %s (bound %s)", waited, tt.aging)
				require.LessOrEqual(t, waited, tt.aging+100*time.Millisecond, "the Low job waited %s", waited)
			})
		})
	}
}

func scheduleHigh(t *testing.T, ctx context.Context, s *ax.Scheduler, n int) {
	reqs := make([]ax.Request, n)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "flood", Options: []ax.ScheduleOption{ax.Priority(ax.High)}}
	}
	if _, err := s.ScheduleMany(ctx, reqs); err != nil {
		t.Errorf("schedule: %v", err)
	}
}

// TestPartitionByAcrossSchedulers: a kind partitioned by a metadata key
// and by a payload field runs at most 2 jobs per tenant at once across
// hosts, while other tenants go on.
func TestPartitionByAcrossSchedulers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		src     ax.PartitionSource
		request func(tenant string) ax.Request
	}{
		{"Metadata", ax.PartitionByMetadata("tenant"), func(tenant string) ax.Request {
			return ax.Request{Kind: "part", Options: []ax.ScheduleOption{ax.Metadata(map[string]string{"tenant": tenant})}}
		}},
		{"PayloadField", ax.PartitionByPayloadField("tenant"), func(tenant string) ax.Request {
			return ax.Request{Kind: "part", Payload: map[string]string{"tenant": tenant}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memstore.New()
				var (
					mu      sync.Mutex
					running = make(map[string]int)
					peak    = make(map[string]int)
					done    atomic.Int64
				)
				hosts := make([]*ax.Scheduler, 2)
				for i := range hosts {
					hosts[i] = newScheduler(t, st, quiet, func(c *ax.Config) { c.Node = fmt.Sprint("host-", i) })
					require.NoError(t, hosts[i].Handle("part", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
						mu.Lock()
						running[j.PartitionKey]++
						peak[j.PartitionKey] = max(peak[j.PartitionKey], running[j.PartitionKey])
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
						mu.Lock()
						running[j.PartitionKey]--
						mu.Unlock()
						done.Add(1)
						return nil
					}), ax.PartitionBy(tt.src, ax.PartitionLimit{Concurrency: 2})))
					start(t, hosts[i])
				}
				var reqs []ax.Request
				for range 20 {
					reqs = append(reqs, tt.request("big"))
				}
				for _, tenant := range []string{"a", "b", "c"} {
					reqs = append(reqs, tt.request(tenant), tt.request(tenant))
				}
				begin := time.Now()
				_, err := hosts[0].ScheduleMany(t.Context(), reqs)
				require.NoError(t, err)
				for done.Load() < int64(len(reqs)) {
					time.Sleep(5 * time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				require.Equal(t, map[string]int{"big": 2, "a": 2, "b": 2, "c": 2}, peak)
				require.Less(t, time.Since(begin), 20*20*time.Millisecond/2+100*time.Millisecond)
			})
		})
	}
}

// TestFlowDeclaration: the hosts that handle a kind store its flow
// settings when they start, the last one to start winning; a host that
// handles it without options removes them; Handle after Start declares
// at once.
func TestFlowDeclaration(t *testing.T) {
	st := memstore.New()
	admin := newAdmin(t, st)
	ctx := t.Context()
	nop := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	flowOf := func(kind string) *ax.FlowState {
		flows, err := admin.Flows(ctx)
		require.NoError(t, err)
		for i := range flows {
			if flows[i].Config.Kind == kind {
				return &flows[i]
			}
		}
		return nil
	}
	a := newScheduler(t, st, quiet, func(c *ax.Config) { c.Node = "a" })
	require.NoError(t, a.Handle("k", nop, ax.GlobalConcurrency(3), ax.MaxPending(100)))
	require.Nil(t, flowOf("k"), "declared at Start, not before")
	start(t, a)
	f := flowOf("k")
	require.NotNil(t, f)
	require.Equal(t, store.FlowConfig{Kind: "k", Concurrency: 3, MaxPending: 100}, f.Config)
	require.Equal(t, "a", f.DeclaredBy)

	b := newScheduler(t, st, quiet, func(c *ax.Config) { c.Node = "b" })
	require.NoError(t, b.Handle("k", nop, ax.RateLimit(10, time.Second)))
	start(t, b)
	require.Equal(t, store.FlowConfig{Kind: "k", Rate: store.RateLimit{Limit: 10, Period: time.Second}}, flowOf("k").Config, "the last host to start wins")

	require.NoError(t, b.Handle("late", nop, ax.GlobalConcurrency(1)))
	require.NotNil(t, flowOf("late"), "Handle after Start declares at once")

	c := newScheduler(t, st, quiet, func(c *ax.Config) { c.Node = "c" })
	require.NoError(t, c.Handle("k", nop))
	start(t, c)
	require.Nil(t, flowOf("k"), "a host without options removes them")
}

// TestFlowOptionsNeedFlowStore: flow options on a store without flow
// control are refused, registering or storing nothing.
func TestFlowOptionsNeedFlowStore(t *testing.T) {
	st := ax.NewFaultStore(memstore.New()) // no FlowStore
	s := newScheduler(t, st, quiet)
	nop := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	for _, opt := range []ax.HandlerOption{
		ax.GlobalConcurrency(1), ax.RateLimit(1, time.Second), ax.MaxPending(1),
		ax.CircuitBreaker(ax.BreakerConfig{}), ax.PartitionBy(ax.PartitionByMetadata("t"), ax.PartitionLimit{Concurrency: 1}),
	} {
		require.ErrorIs(t, s.Handle("k", nop, opt), errors.ErrUnsupported)
	}
	require.NoError(t, s.Handle("k", nop), "nothing was registered")
	_, err := s.Schedule(t.Context(), "k", nil, ax.Sequential("s"))
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = ax.New(ax.Config{Store: st, MaxPending: 10})
	require.ErrorIs(t, err, ax.ErrInvalidConfig)
	_, err = newAdmin(t, st).Flows(t.Context())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// TestPartitionLimitZeroFields: a zero field of PartitionLimit limits
// nothing, as its doc says: a zero Rate with a Per is no rate limit (issue
// 40: it was refused with "want n >= 1 and per > 0"). A limit that sets
// nothing, a negative value or a Rate without Per is still refused, and
// stores no flow settings.
func TestPartitionLimitZeroFields(t *testing.T) {
	st := memstore.New()
	admin := newAdmin(t, st)
	s := newScheduler(t, st, quiet)
	start(t, s)
	nop := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
	src := store.PartitionSource{Metadata: "tenant"}
	tests := []struct {
		name  string
		limit ax.PartitionLimit
		err   error
		want  *store.FlowConfig // nil: none stored
	}{
		{"ZeroRateWithPer", ax.PartitionLimit{Concurrency: 2, Rate: 0, Per: time.Second}, nil,
			&store.FlowConfig{Partition: src, PartitionConcurrency: 2}},
		{"ConcurrencyOnly", ax.PartitionLimit{Concurrency: 1}, nil,
			&store.FlowConfig{Partition: src, PartitionConcurrency: 1}},
		{"RateOnly", ax.PartitionLimit{Rate: 5, Per: time.Second}, nil,
			&store.FlowConfig{Partition: src, PartitionRate: store.RateLimit{Limit: 5, Period: time.Second}}},
		{"Both", ax.PartitionLimit{Concurrency: 3, Rate: 5, Per: time.Minute}, nil,
			&store.FlowConfig{Partition: src, PartitionConcurrency: 3, PartitionRate: store.RateLimit{Limit: 5, Period: time.Minute}}},
		{"Nothing", ax.PartitionLimit{}, ax.ErrInvalidOption, nil},
		{"PerOnly", ax.PartitionLimit{Per: time.Second}, ax.ErrInvalidOption, nil},
		{"RateWithoutPer", ax.PartitionLimit{Rate: 5}, ax.ErrInvalidOption, nil},
		{"NegativePer", ax.PartitionLimit{Concurrency: 1, Per: -time.Second}, ax.ErrInvalidOption, nil},
		{"NegativeRate", ax.PartitionLimit{Rate: -1, Per: time.Second}, ax.ErrInvalidOption, nil},
		{"NegativeConcurrency", ax.PartitionLimit{Concurrency: -1, Rate: 1, Per: time.Second}, ax.ErrInvalidOption, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Handle(tt.name, nop, ax.PartitionBy(ax.PartitionByMetadata("tenant"), tt.limit))
			require.ErrorIs(t, err, tt.err)
			flows, err := admin.Flows(t.Context())
			require.NoError(t, err)
			var got *store.FlowConfig
			for i := range flows {
				if flows[i].Config.Kind == tt.name {
					got = &flows[i].Config
					got.Kind = ""
				}
			}
			require.Equal(t, tt.want, got)
		})
	}
}
