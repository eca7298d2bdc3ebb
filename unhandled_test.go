package ax_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// unhandledLog records a Scheduler's EventKindUnhandled events.
type unhandledLog struct {
	mu    sync.Mutex
	kinds []string
}

func (l *unhandledLog) Observe(e ax.Event) {
	if e.Kind != ax.EventKindUnhandled {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kinds = append(l.kinds, e.JobKind)
}

func (l *unhandledLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.kinds...)
}

// TestUnhandledKindWarning: a job of a kind no node handles is warned
// about once per kind (not per job), only after the grace (not while the
// cluster starts), again after an hour while it lasts, and no longer once
// a node handles the kind; Admin.Kinds and Stats mark the kind meanwhile.
func TestUnhandledKindWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		st := memstore.New()
		core, logs := observer.New(zapcore.InfoLevel)
		events := &unhandledLog{}
		s := newScheduler(t, st, func(c *ax.Config) {
			c.Node, c.Logger, c.Observers = "a", zap.New(core), []ax.Observer{events}
			c.UnhandledKindGrace = 5 * time.Minute
			slowPolls(c)
		})
		noop := ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })
		require.NoError(t, s.Handle("email", noop))
		start(t, s)
		warnings := func() []string {
			var out []string
			for _, e := range logs.FilterMessageSnippet("no running node handles this kind").All() {
				out = append(out, e.ContextMap()["kind"].(string))
			}
			return out
		}
		schedule := func(kind string, n int, opts ...ax.ScheduleOption) {
			for range n {
				_, err := s.Schedule(ctx, kind, nil, opts...)
				require.NoError(t, err)
			}
		}
		unhandled := func() []string {
			kinds, err := s.Admin().Kinds(ctx)
			require.NoError(t, err)
			var out []string
			for _, k := range kinds {
				if k.Unhandled {
					out = append(out, k.Kind)
				}
			}
			stats, err := s.Stats(ctx)
			require.NoError(t, err)
			require.True(t, stats.UnhandledKnown)
			require.Len(t, stats.Unhandled, len(out), "Stats and Kinds agree")
			return out
		}

		steps := []struct {
			name      string
			do        func()
			wait      time.Duration
			warnings  []string // all so far
			unhandled []string
		}{
			{"a misspelt kind due for an hour, within the grace of the cluster's start", func() {
				schedule("emial", 3, ax.At(time.Now().Add(-time.Hour)))
				schedule("email", 3)
			},
				4 * time.Minute, nil, nil},
			{"past the grace: one warning for the kind", nil, 2 * time.Minute, []string{"emial"}, []string{"emial"}},
			{"more jobs of it: no more warnings", func() { schedule("emial", 50) }, 30 * time.Minute, []string{"emial"}, []string{"emial"}},
			{"an hour later: warned again", nil, 31 * time.Minute, []string{"emial", "emial"}, []string{"emial"}},
			{"a node handles it: no longer unhandled", func() { require.NoError(t, s.Handle("emial", noop)) },
				time.Minute, []string{"emial", "emial"}, nil},
		}
		for _, step := range steps {
			if step.do != nil {
				step.do()
			}
			time.Sleep(step.wait)
			synctest.Wait()
			require.Equal(t, step.warnings, warnings(), step.name)
			require.Equal(t, step.warnings, events.all(), step.name)
			require.Equal(t, step.unhandled, unhandled(), step.name)
		}
		require.Len(t, logs.FilterMessageSnippet("kind no longer unhandled").All(), 1)
	})
}

// slowPolls makes a Scheduler's polls rare, for tests that let hours of
// fake time pass.
func slowPolls(c *ax.Config) {
	c.PollInterval, c.RescueInterval = 10*time.Second, 30*time.Second
}

// TestUnhandledKindRollingDeploy: a kind whose only host stopped is not
// reported until the grace has passed since it stopped; a successor that
// handles it keeps it handled.
func TestUnhandledKindRollingDeploy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		st := memstore.New()
		grace := 5 * time.Minute
		web := newScheduler(t, st, slowPolls, func(c *ax.Config) { c.Node, c.UnhandledKindGrace = "web", grace })
		start(t, web)
		old := newScheduler(t, st, slowPolls, func(c *ax.Config) { c.Node = "worker-1" })
		require.NoError(t, old.Handle("report", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
		start(t, old)
		time.Sleep(time.Hour)
		require.NoError(t, old.Stop(ctx))
		_, err := web.Schedule(ctx, "report", nil, ax.At(time.Now().Add(-time.Hour)))
		require.NoError(t, err)
		for _, c := range []struct {
			wait      time.Duration
			unhandled bool
		}{{grace - time.Second, false}, {2 * time.Second, true}} {
			time.Sleep(c.wait)
			synctest.Wait()
			kinds, err := web.Admin().Kinds(ctx)
			require.NoError(t, err)
			require.Len(t, kinds, 1)
			require.Equal(t, c.unhandled, kinds[0].Unhandled, "%s after the stop", c.wait)
		}
	})
}

// listCountingStore counts ListNodes calls.
type listCountingStore struct {
	*memstore.Store
	lists atomic.Int64
}

func (c *listCountingStore) ListNodes(ctx context.Context) ([]*store.NodeRecord, error) {
	c.lists.Add(1)
	return c.Store.ListNodes(ctx)
}

// TestRefuseUnknownKinds: with Config.RefuseUnknownKinds, a kind that
// neither this host nor any registered node handles is refused with
// ErrUnknownKind and nothing is stored; known kinds cost no store call
// once the kinds are read, and an unknown kind at most one read per
// LeaderTTL/3.
func TestRefuseUnknownKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		st := &listCountingStore{Store: memstore.New()}
		require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker", Kinds: []string{"report"}, TTL: time.Hour}))
		require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "old", Kinds: []string{"legacy"}, TTL: time.Hour}))
		_, err := st.StopNode(ctx, "old")
		require.NoError(t, err)
		s := newScheduler(t, st, func(c *ax.Config) { c.RefuseUnknownKinds, c.LeaderTTL = true, 3*time.Second })
		require.NoError(t, s.Handle("email", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
		admin := s.Admin()

		cases := []struct {
			name     string
			schedule func() error
			err      error
			lists    int64 // ListNodes calls, in all
		}{
			{"handled here: no read", func() error { _, err := s.Schedule(ctx, "email", nil); return err }, nil, 0},
			{"handled by a running node: one read", func() error { _, err := s.Schedule(ctx, "report", nil); return err }, nil, 1},
			{"handled by a stopped node", func() error { _, err := s.Schedule(ctx, "legacy", nil); return err }, nil, 1},
			{"misspelt, just read: no read", func() error { _, err := s.Schedule(ctx, "reprot", nil); return err }, ax.ErrUnknownKind, 1},
			{"misspelt in a batch of many", func() error {
				_, err := s.ScheduleMany(ctx, []ax.Request{{Kind: "email"}, {Kind: "emial"}})
				return err
			}, ax.ErrUnknownKind, 1},
			{"misspelt follow-up", func() error {
				_, err := s.Schedule(ctx, "email", nil, ax.FollowUp([]ax.State{ax.StateSucceeded}, "reprot", nil))
				return err
			}, ax.ErrUnknownKind, 1},
		}
		for _, c := range cases {
			err := c.schedule()
			require.ErrorIs(t, err, c.err, c.name)
			require.Equal(t, c.lists, st.lists.Load(), c.name)
		}
		n, err := admin.Count(ctx, ax.JobFilter{})
		require.NoError(t, err)
		require.Equal(t, int64(3), n, "the refused calls stored nothing")

		// A node that handles the kind registers: found at the next read,
		// at most LeaderTTL/3 later.
		require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker-2", Kinds: []string{"reprot"}, TTL: time.Hour}))
		_, err = s.Schedule(ctx, "reprot", nil)
		require.ErrorIs(t, err, ax.ErrUnknownKind, "within LeaderTTL/3 of the last read")
		time.Sleep(time.Second)
		_, err = s.Schedule(ctx, "reprot", nil)
		require.NoError(t, err)
		require.Equal(t, int64(2), st.lists.Load())
		for range 100 {
			_, err = s.Schedule(ctx, "reprot", nil)
			require.NoError(t, err)
		}
		require.Equal(t, int64(2), st.lists.Load(), "a known kind costs no read")
	})
}

// TestRefuseUnknownKindsConfig: the option needs a node registry, and is
// off by default.
func TestRefuseUnknownKindsConfig(t *testing.T) {
	cases := []struct {
		name   string
		config ax.Config
		err    error
	}{
		{"off by default", ax.Config{Store: memstore.New()}, nil},
		{"on, with a node registry", ax.Config{Store: memstore.New(), RefuseUnknownKinds: true}, nil},
		{"on, without a node registry", ax.Config{Store: noRegistryStore{memstore.New()}, RefuseUnknownKinds: true}, ax.ErrInvalidConfig},
		{"negative grace", ax.Config{Store: memstore.New(), UnhandledKindGrace: -time.Second}, ax.ErrInvalidConfig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ax.New(c.config)
			require.ErrorIs(t, err, c.err)
			if c.err != nil {
				return
			}
			_, err = s.Schedule(t.Context(), "nobody.handles", nil)
			require.Equal(t, c.config.RefuseUnknownKinds, errors.Is(err, ax.ErrUnknownKind))
		})
	}
}

// noRegistryStore is a store without optional interfaces.
type noRegistryStore struct{ store.Store }

// BenchmarkScheduleRefuseUnknownKinds measures what Config.RefuseUnknownKinds
// adds to a Schedule of a kind another node handles: a lookup in the
// cached kinds, no store call.
func BenchmarkScheduleRefuseUnknownKinds(b *testing.B) {
	for _, refuse := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[refuse]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			st := memstore.New()
			require.NoError(b, st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker", Kinds: []string{"report"}, TTL: time.Hour}))
			s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), RefuseUnknownKinds: refuse})
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Schedule(ctx, "report", nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
