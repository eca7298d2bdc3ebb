package deploytest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestBouncerPollingOnlyClaimsBelowCursor: a Store whose pool goes through
// PgBouncer in transaction mode and that has no direct connection for its
// listener must not LISTEN through the pooler. A LISTEN there succeeds but
// registers on a server connection that goes on to serve other clients,
// so the listener hears nothing while the Store believes it listens and
// starts its claims from cursors (cursor.go): a job another host inserts
// below a cursor (run_at before the last claim's now(), as a transaction
// that started earlier and commits later inserts it) was skipped until the
// next audit, up to 10 s later. With WithTransactionPooler and no
// WithListenerConnString the Store polls: no cursor, and the next claim
// finds the job.
func TestBouncerPollingOnlyClaimsBelowCursor(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	b := startBouncer(t, pgtest.ServerURL())
	direct := directURL(t)
	pooled := b.url(t, direct)
	newStore := func() *pgstore.Store {
		st, err := pgstore.New(ctx, poolOn(t, pooled, bouncerMode(), 4), pgstore.WithoutMigrate(), pgstore.WithTransactionPooler())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	host, producer := newStore(), newStore()
	unsubscribe := host.Subscribe(func(store.Notification) {})
	defer unsubscribe()

	claim := func() []*store.JobRecord {
		res, err := host.Claim(ctx, &store.ClaimParams{Owner: "host", Kinds: []store.KindLimit{{Kind: "k", Limit: 10}},
			Limit: 10, LeaseDuration: time.Minute})
		require.NoError(t, err)
		return res.Jobs
	}
	require.Empty(t, claim()) // a cursor would now sit at this claim's now()
	_, err := producer.Insert(ctx, []store.InsertParams{{ID: uuid.Must(uuid.NewV7()), Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1,
		Priority: 2, RunAt: time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
	require.Len(t, claim(), 1, "a job inserted below the last claim's position is claimed at once")
}
