package axhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// End-to-end completion callbacks: a job submitted through the API with a
// callback_url, run by a Scheduler, whose end is delivered by the
// ax.callback follow-up job. They need a store that inserts follow-ups
// (store.FollowUpStore), and skip until memstore implements it.

func requireFollowUpStore(t *testing.T, st store.Store) {
	t.Helper()
	if _, ok := st.(store.FollowUpStore); !ok {
		t.Skipf("%T does not implement store.FollowUpStore yet: completion callbacks need a store that inserts follow-up jobs", st)
	}
}

// withBackoff makes callback retries wait d each, for the test.
func withBackoff(t *testing.T, d time.Duration) {
	saved := CallbackBackoff
	CallbackBackoff = []time.Duration{d}
	t.Cleanup(func() { CallbackBackoff = saved })
}

// receiver is a callback endpoint that records deliveries and answers
// with status(n) for the n-th (1-based).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	times  []time.Time
	bodies []CallbackBody
	ok     atomic.Int64
}

func newReceiver(t *testing.T, status func(n int, r *http.Request) int) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := VerifyRequest(r, testSecret, time.Minute, time.Now()); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var b CallbackBody
		_ = json.NewDecoder(r.Body).Decode(&b)
		rc.mu.Lock()
		rc.times = append(rc.times, time.Now())
		rc.bodies = append(rc.bodies, b)
		n := len(rc.times)
		rc.mu.Unlock()
		code := status(n, r)
		if code < 300 {
			rc.ok.Add(1)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) calls() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.times)
}

// callbackFixtureE2E is a started fixture whose host delivers callbacks
// (maxAttempts each) and handles "invoice".
func callbackFixtureE2E(t *testing.T, st store.Store, maxAttempts int) *fixture {
	return newFixture(t, fixtureOptions{store: st, start: true, setup: func(s *ax.Scheduler) {
		cb, err := RegisterCallbacks(s, CallbackConfig{Signer: Signer{KeyID: "callbacks", Secret: testSecret},
			Policy: CallbackPolicy{AllowPrivate: true, Timeout: 2 * time.Second}, MaxAttempts: maxAttempts})
		require.NoError(t, err)
		t.Cleanup(cb.Close)
		require.NoError(t, ax.HandleResult(s, "invoice", func(_ context.Context, _ *ax.Job, p map[string]int) (map[string]int, error) {
			return map[string]int{"total": p["n"] * 10}, nil
		}))
	}})
}

// submitWithCallback submits an invoice through the API with a callback
// to url and returns its ID.
func submitWithCallback(t *testing.T, f *fixture, url string) uuid.UUID {
	res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", `{"kind":"invoice","payload":{"n":4},"callback_url":"`+url+`"}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
	var sub SubmitResponse
	require.NoError(t, json.Unmarshal(b, &sub))
	return sub.ID
}

// deliveries returns the callback deliveries of job id from the API.
func deliveries(t *testing.T, f *fixture, id uuid.UUID) []*store.JobRecord {
	res, b := f.call(&f.app, "GET", APIPrefix+"/jobs/"+id.String()+"/followups", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
	var out FollowUpsResponse
	require.NoError(t, json.Unmarshal(b, &out))
	var cbs []*store.JobRecord
	for _, j := range out.Jobs {
		if j.Kind == CallbackKind {
			cbs = append(cbs, j)
		}
	}
	return cbs
}

// TestCallbackRetriedThenDelivered: a receiver that fails three times
// then succeeds gets the callback once as a success, each retry after
// the backoff; the delivery is one succeeded job of four attempts.
func TestCallbackRetriedThenDelivered(t *testing.T) {
	requireFollowUpStore(t, memstore.New())
	const backoff = 300 * time.Millisecond
	withBackoff(t, backoff)
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n <= 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	f := callbackFixtureE2E(t, nil, 0)
	id := submitWithCallback(t, f, rc.srv.URL+"/hooks/ax")
	waitFor(t, "the callback delivered", func() bool {
		cbs := deliveries(t, f, id)
		return len(cbs) == 1 && cbs[0].State == ax.StateSucceeded
	})
	time.Sleep(2 * backoff) // nothing more arrives
	require.Equal(t, int64(1), rc.ok.Load(), "deliveries that succeeded")
	require.Equal(t, 4, rc.calls())
	rc.mu.Lock()
	for i := 1; i < len(rc.times); i++ {
		require.GreaterOrEqual(t, rc.times[i].Sub(rc.times[i-1]), backoff-50*time.Millisecond, "retry %d came before the backoff", i)
	}
	last := rc.bodies[3]
	rc.mu.Unlock()
	require.Equal(t, id.String(), last.JobID)
	require.Equal(t, ax.StateSucceeded, last.State)
	require.JSONEq(t, `{"total":40}`, string(last.Result))
	cbs := deliveries(t, f, id)
	require.Equal(t, 4, cbs[0].Attempt)
	require.Equal(t, id, cbs[0].Parent)
}

// TestCallbackDeadIsVisible: a receiver that always fails leaves a dead
// delivery, in the API and on the job's dashboard page.
func TestCallbackDeadIsVisible(t *testing.T) {
	requireFollowUpStore(t, memstore.New())
	withBackoff(t, 50*time.Millisecond)
	rc := newReceiver(t, func(int, *http.Request) int { return http.StatusInternalServerError })
	f := callbackFixtureE2E(t, nil, 3)
	id := submitWithCallback(t, f, rc.srv.URL+"/hooks/ax")
	waitFor(t, "the callback dead", func() bool {
		cbs := deliveries(t, f, id)
		return len(cbs) == 1 && cbs[0].State == ax.StateDead
	})
	require.Equal(t, 3, rc.calls())
	require.Zero(t, rc.ok.Load())
	cbs := deliveries(t, f, id)
	require.Contains(t, cbs[0].Errors[len(cbs[0].Errors)-1].Error, "500")
	b := f.browser()
	b.login("app", testSecret)
	_, page := b.get("/jobs/" + id.String())
	require.Contains(t, page, "callback failed")
	_, page = b.get("/dead?kind=" + CallbackKind)
	require.Contains(t, page, cbs[0].ID.String())
}

// severable is a store whose process "dies": after sever, every call
// fails, as if the host were killed (its leases then expire).
type severable struct {
	store.Store
	cut atomic.Bool
}

var errSevered = errors.New("host killed")

func (s *severable) check() error {
	if s.cut.Load() {
		return errSevered
	}
	return nil
}

func (s *severable) Insert(ctx context.Context, p []store.InsertParams) ([]store.InsertResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.Insert(ctx, p)
}

func (s *severable) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.Claim(ctx, p)
}

func (s *severable) ExtendLeases(ctx context.Context, p *store.ExtendParams) (*store.ExtendResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.ExtendLeases(ctx, p)
}

func (s *severable) Finish(ctx context.Context, p []store.FinishParams) ([]bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.Finish(ctx, p)
}

func (s *severable) Get(ctx context.Context, id uuid.UUID) (*store.JobRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, id)
}

func (s *severable) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*store.JobRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.Control(ctx, id, op)
}

func (s *severable) RescueExpired(ctx context.Context, limit int) ([]store.Rescued, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.RescueExpired(ctx, limit)
}

func (s *severable) Now(ctx context.Context) (time.Time, error) {
	if err := s.check(); err != nil {
		return time.Time{}, err
	}
	return s.Store.Now(ctx)
}

// FollowUps forwards to the store (which implements it, or the test
// skipped).
func (s *severable) FollowUps(ctx context.Context, id uuid.UUID) ([]*store.JobRecord, error) {
	return s.Store.(store.FollowUpStore).FollowUps(ctx, id)
}

// TestCallbackDeliveredAfterRestart: the host delivering a callback is
// killed while the receiver holds the request; another host (the
// restarted process) takes the delivery back when its lease expires and
// delivers it: the receiver sees one success.
func TestCallbackDeliveredAfterRestart(t *testing.T) {
	var st store.Store = memstore.New()
	requireFollowUpStore(t, st)
	withBackoff(t, 50*time.Millisecond)
	inFlight := make(chan struct{})
	var once sync.Once
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == 1 {
			once.Do(func() { close(inFlight) })
			<-r.Context().Done() // the connection drops with the host
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	quick := func(c *ax.Config) {
		c.LeaseDuration, c.HeartbeatInterval, c.RescueInterval, c.PollInterval = 500*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		c.Logger = zap.NewNop()
	}
	register := func(s *ax.Scheduler) {
		cb, err := RegisterCallbacks(s, CallbackConfig{Signer: Signer{KeyID: "callbacks", Secret: testSecret},
			Policy: CallbackPolicy{AllowPrivate: true, Timeout: 5 * time.Second}})
		require.NoError(t, err)
		t.Cleanup(cb.Close)
		require.NoError(t, ax.Handle(s, "invoice", func(context.Context, *ax.Job, json.RawMessage) error { return nil }))
	}
	// Host A delivers, and dies mid-delivery.
	sa := &severable{Store: st}
	ca := ax.Config{Store: sa, Node: "host-a"}
	quick(&ca)
	a, err := ax.New(ca)
	require.NoError(t, err)
	register(a)
	require.NoError(t, a.Start(t.Context()))
	opt, err := CallbackOption(CallbackPolicy{AllowPrivate: true}, rc.srv.URL+"/hooks/ax")
	require.NoError(t, err)
	res, err := a.Schedule(t.Context(), "invoice", map[string]int{"n": 1}, opt)
	require.NoError(t, err)
	select {
	case <-inFlight:
	case <-time.After(20 * time.Second):
		t.Fatal("the first delivery never reached the receiver")
	}
	sa.cut.Store(true)
	rc.srv.CloseClientConnections()
	stopCtx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_ = a.Stop(stopCtx) // fails to write anything: the host is gone
	cancel()

	// Host B, the restarted process, on the same store.
	cb := ax.Config{Store: st, Node: "host-b"}
	quick(&cb)
	b, err := ax.New(cb)
	require.NoError(t, err)
	register(b)
	require.NoError(t, b.Start(t.Context()))
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	waitFor(t, "the callback delivered by the restarted host", func() bool { return rc.ok.Load() == 1 })
	fus, err := st.(store.FollowUpStore).FollowUps(t.Context(), res.ID)
	require.NoError(t, err)
	var delivery *store.JobRecord
	for _, j := range fus {
		if j.Kind == CallbackKind {
			delivery = j
		}
	}
	require.NotNil(t, delivery)
	waitFor(t, "the delivery job succeeded", func() bool {
		j, err := st.Get(t.Context(), delivery.ID)
		return err == nil && j.State == ax.StateSucceeded
	})
	require.Equal(t, int64(1), rc.ok.Load())
	require.True(t, strings.HasPrefix(rc.srv.URL, "http://127.0.0.1"))
}
