package axhttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

func TestCallbackPolicyCheck(t *testing.T) {
	strict := CallbackPolicy{}
	allowed := CallbackPolicy{AllowedHosts: []string{"hooks.example.com", ".partner.example"}}
	cases := []struct {
		name   string
		policy CallbackPolicy
		url    string
		ok     bool
	}{
		{"https public name", strict, "https://hooks.example.com/ax", true},
		{"http", strict, "http://hooks.example.com/ax", true},
		{"ftp", strict, "ftp://hooks.example.com/ax", false},
		{"relative", strict, "/hooks", false},
		{"user info", strict, "https://user:pw@hooks.example.com/", false},
		{"loopback literal", strict, "http://127.0.0.1:8080/", false},
		{"private literal", strict, "http://10.1.2.3/", false},
		{"link-local metadata service", strict, "http://169.254.169.254/latest/meta-data", false},
		{"IPv6 loopback", strict, "http://[::1]/", false},
		{"IPv6 ULA", strict, "http://[fd00::1]/", false},
		{"IPv4-mapped loopback", strict, "http://[::ffff:127.0.0.1]/", false},
		{"CGNAT", strict, "http://100.64.0.1/", false},
		{"public literal", strict, "http://93.184.215.14/", true},
		{"private allowed", CallbackPolicy{AllowPrivate: true}, "http://127.0.0.1:8080/", true},
		{"allowed host", allowed, "https://hooks.example.com/x", true},
		{"allowed subdomain", allowed, "https://a.b.partner.example/x", true},
		{"allowed domain itself", allowed, "https://partner.example/x", true},
		{"host not allowed", allowed, "https://evil.example/x", false},
		{"suffix trick", allowed, "https://evilpartner.example/x", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.policy.Check(c.url)
			if c.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrCallbackURL)
			}
		})
	}
}

// callbackFixture is a memstore Scheduler (not started) with a finished job
// to report, and Callbacks whose deliver is called directly.
func callbackFixture(t *testing.T, policy CallbackPolicy) (*Callbacks, *ax.Job) {
	t.Helper()
	st := memstore.New()
	s, err := ax.New(ax.Config{Store: st})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	policy.Timeout = 2 * time.Second
	cb, err := RegisterCallbacks(s, CallbackConfig{Signer: Signer{KeyID: "callbacks", Secret: testSecret}, Policy: policy})
	require.NoError(t, err)
	t.Cleanup(cb.Close)
	parent := uuid.Must(uuid.NewV7())
	ctx := context.Background()
	_, err = st.Insert(ctx, []store.InsertParams{{ID: parent, Kind: "invoice", Payload: []byte(`{}`), Priority: 2, MaxAttempts: 1}})
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "invoice", Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	_, err = st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: parent, Token: res.Jobs[0].LeaseToken}, Outcome: store.OutcomeDead, Error: "card declined"}})
	require.NoError(t, err)
	return cb, &ax.Job{ID: uuid.Must(uuid.NewV7()), Kind: CallbackKind, Parent: parent}
}

// TestCallbackDelivery: a receiver that fails three times then succeeds
// sees four signed deliveries of the same body; the first three fail the
// attempt (retried), the fourth succeeds.
func TestCallbackDelivery(t *testing.T) {
	var calls atomic.Int64
	var bodies [][]byte
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, VerifyRequest(r, testSecret, time.Minute, time.Now()))
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, b)
		if calls.Add(1) <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	cb, job := callbackFixture(t, CallbackPolicy{AllowPrivate: true})
	p := callbackPayload{URL: recv.URL + "/hooks?tenant=7"}
	for i := range 3 {
		err := cb.deliver(context.Background(), job, p)
		require.Error(t, err, "delivery %d", i)
		require.NotErrorIs(t, err, ax.ErrSkipRetry, "a 503 is retried")
	}
	require.NoError(t, cb.deliver(context.Background(), job, p))
	require.Len(t, bodies, 4)
	var got CallbackBody
	require.NoError(t, json.Unmarshal(bodies[3], &got))
	require.Equal(t, job.Parent.String(), got.JobID)
	require.Equal(t, ax.StateDead, got.State)
	require.Equal(t, "card declined", got.Error)
	for _, b := range bodies {
		require.Equal(t, bodies[0], b)
	}
}

// TestCallbackPermanentFailures: a refused address (checked when dialling,
// after DNS), a redirect and a 4xx answer are not retried.
func TestCallbackPermanentFailures(t *testing.T) {
	redirect := httptest.NewServer(http.RedirectHandler("http://10.0.0.1/", http.StatusFound))
	defer redirect.Close()
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
	defer gone.Close()
	cases := []struct {
		name   string
		policy CallbackPolicy
		url    string
	}{
		// "localhost" is a name: Check lets it through, the dialer refuses
		// the loopback address it resolves to.
		{"private address after DNS", CallbackPolicy{}, "http://localhost:1/"},
		{"redirect", CallbackPolicy{AllowPrivate: true}, redirect.URL},
		{"410 Gone", CallbackPolicy{AllowPrivate: true}, gone.URL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cb, job := callbackFixture(t, c.policy)
			err := cb.deliver(context.Background(), job, callbackPayload{URL: c.url})
			require.ErrorIs(t, err, ax.ErrSkipRetry)
			if c.name == "private address after DNS" {
				require.True(t, errors.Is(err, ErrCallbackURL), "%v", err)
			}
		})
	}
}
