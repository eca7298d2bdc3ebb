package ax

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax/store"
)

// Helpers for the runtime components' own tests: a runtime that is built
// but not started, so each test runs only the component it tests, and
// attempts made from jobs really claimed in a store (so their leases are
// real).

// testRuntime returns a runtime over st, not started, with cfg edited.
func testRuntime(t *testing.T, st store.Store, edit ...func(*Config)) *runtime {
	t.Helper()
	cfg := Config{Store: st, Logger: zap.NewNop()}
	for _, e := range edit {
		e(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	return newRuntime(s)
}

// testAttempt is an attempt registered in a test runtime, with the context
// its handler would run under.
type testAttempt struct {
	*attempt
	ctx context.Context
}

// claimAttempts inserts n jobs of kind into st, claims them with lease,
// and registers them in r as running attempts.
func claimAttempts(t *testing.T, r *runtime, st store.Store, kind string, n int, lease time.Duration) []testAttempt {
	t.Helper()
	ctx := context.Background()
	params := make([]store.InsertParams, n)
	for i := range params {
		params[i] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: kind, Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3}
	}
	_, err := st.Insert(ctx, params)
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "test", Kinds: []store.KindLimit{{Kind: kind, Limit: n}}, Limit: n, LeaseDuration: lease})
	require.NoError(t, err)
	require.Len(t, res.Jobs, n)
	out := make([]testAttempt, n)
	for i, rec := range res.Jobs {
		out[i] = registerAttempt(t, r, rec)
	}
	return out
}

// registerAttempt registers rec, a claimed job, as a running attempt of r.
func registerAttempt(t *testing.T, r *runtime, rec *store.JobRecord) testAttempt {
	t.Helper()
	kh := &kindHandler{kind: rec.Kind, handler: HandlerFunc(func(context.Context, *Job) error { return nil }),
		settings: handlerSettings{timeout: time.Minute, maxAttempts: 3, retry: ExponentialBackoff{}, concurrency: 100}}
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	a := &attempt{job: jobFromRecord(rec), kind: kh, lease: store.Lease{ID: rec.ID, Token: rec.LeaseToken},
		cancel: cancel, lastExtended: time.Now()}
	r.mu.Lock()
	r.register(a)
	r.mu.Unlock()
	return testAttempt{attempt: a, ctx: ctx}
}

// registered reports whether a is in r's registry.
func registered(r *runtime, a *attempt) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[a.lease] == a
}
