package ax

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// extendLog records the leases of every ExtendLeases call.
type extendLog struct {
	mu     sync.Mutex
	leases [][]store.Lease
}

func (l *extendLog) record(p *store.ExtendParams) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases = append(l.leases, append([]store.Lease(nil), p.Leases...))
	return nil
}

func (l *extendLog) last() []store.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.leases) == 0 {
		return nil
	}
	return l.leases[len(l.leases)-1]
}

// TestHeartbeatExtendsHeldLeases: one beat extends, in one store call, the
// leases of attempts whose handler runs and of those whose outcome waits
// to be written; not those lost or handed back.
func TestHeartbeatExtendsHeldLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		var log extendLog
		fs.SetOnExtend(log.record)
		r := testRuntime(t, fs, func(c *Config) { c.LeaseDuration = time.Second })
		as := claimAttempts(t, r, fs, "k", 4, time.Second)
		r.mu.Lock()
		as[1].state = attemptQueued
		as[2].lost = true
		as[3].released = true
		r.mu.Unlock()
		time.Sleep(500 * time.Millisecond)
		r.heartbeat.beat()
		require.Equal(t, 1, len(log.leases), "one store call per beat")
		require.ElementsMatch(t, []store.Lease{as[0].lease, as[1].lease}, log.last())
		for _, a := range as[:2] {
			rec, err := fs.Get(t.Context(), a.lease.ID)
			require.NoError(t, err)
			require.Equal(t, time.Now().Add(time.Second), rec.LeaseExpiresAt, "lease not pushed to now + LeaseDuration")
		}
		require.NoError(t, as[0].ctx.Err())
	})
}

// TestHeartbeatLostLeaseCancelsHandler: the store reports a lease lost
// (the job was rescued meanwhile): the running handler is cancelled with
// ErrLeaseLost and its attempt marked lost (no longer extended); an
// attempt whose outcome waits is not cancelled (it has no handler) and
// its write will be refused.
func TestHeartbeatLostLeaseCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		r := testRuntime(t, fs, func(c *Config) { c.LeaseDuration = time.Second })
		as := claimAttempts(t, r, fs, "k", 2, 100*time.Millisecond)
		r.mu.Lock()
		as[1].state = attemptQueued
		r.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		rescued, err := fs.RescueExpired(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, rescued, 2)
		r.heartbeat.beat()
		require.ErrorIs(t, context.Cause(as[0].ctx), ErrLeaseLost)
		require.True(t, as[0].lost)
		require.NoError(t, as[1].ctx.Err(), "a queued attempt has no handler to cancel")
	})
}

// TestHeartbeatTwoAttemptsOfOneJob: this host holds two attempts of the
// same job (the first's outcome being written after the job was claimed
// again). The store reports the first's lease lost and extends the
// second's: only the first is affected. (Before the registry was keyed by
// lease, the job's ID stood for both.)
func TestHeartbeatTwoAttemptsOfOneJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		r := testRuntime(t, st, func(c *Config) { c.LeaseDuration = time.Second })
		first := claimAttempts(t, r, st, "k", 1, time.Second)[0]
		r.mu.Lock()
		first.state = attemptQueued
		r.mu.Unlock()
		// The first attempt's retry was written and the job claimed again.
		ok, err := st.Finish(t.Context(), []store.FinishParams{{Lease: first.lease, Outcome: store.OutcomeRetry}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, ok)
		res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: "k", Limit: 1}}, Limit: 1, LeaseDuration: time.Second})
		require.NoError(t, err)
		second := registerAttempt(t, r, res.Jobs[0])
		require.Equal(t, first.lease.ID, second.lease.ID)

		time.Sleep(500 * time.Millisecond)
		r.heartbeat.beat()
		require.NoError(t, second.ctx.Err(), "the second attempt was cancelled")
		require.False(t, second.lost)
		rec, err := st.Get(t.Context(), second.lease.ID)
		require.NoError(t, err)
		require.Equal(t, time.Now().Add(time.Second), rec.LeaseExpiresAt, "the second attempt's lease was not extended")
	})
}

// TestHeartbeatSelfCancelsWhenStoreUnreachable: when no extension got
// through for a whole LeaseDuration, the host assumes its leases lapsed
// and cancels its running handlers itself (ErrLeaseLost), before another
// host reruns their jobs: whether the store refuses at once (down) or
// never answers (hung: each extension runs until the lease lapses).
func TestHeartbeatSelfCancelsWhenStoreUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(*FaultStore)
	}{
		{"down", func(fs *FaultStore) { fs.Down.Store(true) }},
		{"hung", func(fs *FaultStore) { fs.Hang.Store(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := NewFaultStore(memstore.New())
				r := testRuntime(t, fs, func(c *Config) { c.LeaseDuration = 300 * time.Millisecond })
				as := claimAttempts(t, r, fs, "k", 1, 300*time.Millisecond)
				tc.cut(fs)
				go r.heartbeat.run()
				time.Sleep(300 * time.Millisecond)
				synctest.Wait()
				require.NoError(t, as[0].ctx.Err(), "cancelled before a whole lease passed")
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				require.ErrorIs(t, context.Cause(as[0].ctx), ErrLeaseLost)
				r.heartbeat.stop()
			})
		})
	}
}

// TestHeartbeatThroughASlowStore: a store that takes longer than
// HeartbeatInterval to answer (but less than the lease) still has every
// lease extended: a beat's extension may run until the oldest lease it
// carries lapses (keepAliveTimeout). Bounded by the interval, every
// extension timed out, and the host cancelled its own handlers once a
// lease had passed (TestHeartbeatsNeverStarve, internal/e2e, in a loaded
// CI run).
func TestHeartbeatThroughASlowStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		const lease = time.Second // beats every 333 ms
		fs.SetBeforeCall(func(ctx context.Context, method string) error {
			if method != "ExtendLeases" {
				return nil
			}
			select {
			case <-time.After(400 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		var log extendLog
		fs.SetOnExtend(log.record)
		r := testRuntime(t, fs, func(c *Config) { c.LeaseDuration = lease })
		as := claimAttempts(t, r, fs, "k", 3, lease)
		go r.heartbeat.run()
		defer r.heartbeat.stop()
		time.Sleep(10 * lease)
		synctest.Wait()
		for _, a := range as {
			require.NoError(t, context.Cause(a.ctx), "a handler was cancelled")
			require.False(t, a.lost)
			rec, err := fs.Get(t.Context(), a.lease.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateRunning, rec.State)
			require.True(t, rec.LeaseExpiresAt.After(time.Now()), "lease lapsed in the store")
		}
		require.GreaterOrEqual(t, len(log.leases), 10, "extensions that got through")
	})
}

// TestHeartbeatStopEndsExtensionInFlight: stop does not wait out an
// extension the store does not answer (it may run until the oldest lease
// lapses): it ends it at once.
func TestHeartbeatStopEndsExtensionInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := NewFaultStore(memstore.New())
		r := testRuntime(t, fs, func(c *Config) { c.LeaseDuration = time.Minute })
		claimAttempts(t, r, fs, "k", 1, time.Minute)
		fs.Hang.Store(true)
		go r.heartbeat.run()
		time.Sleep(r.cfg.HeartbeatInterval + time.Millisecond)
		synctest.Wait()
		require.EqualValues(t, 1, fs.Calls("ExtendLeases"), "no extension in flight")
		at := time.Now()
		r.heartbeat.stop()
		require.Equal(t, at, time.Now(), "stop waited for the extension")
	})
}

// TestHeartbeatCancelRequested: a user cancelled a job running here from
// another host: the next beat cancels its handler with ErrJobCancelled.
func TestHeartbeatCancelRequested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		r := testRuntime(t, st)
		as := claimAttempts(t, r, st, "k", 2, time.Minute)
		_, err := st.Control(t.Context(), as[0].lease.ID, store.OpCancel)
		require.NoError(t, err)
		r.heartbeat.beat()
		require.ErrorIs(t, context.Cause(as[0].ctx), ErrJobCancelled)
		require.NoError(t, as[1].ctx.Err())
	})
}
