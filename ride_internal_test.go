package ax

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestTakeRiders: a claim takes the plain outcomes from the queue, and
// leaves, in their order, those whose write may wait for another
// transaction's lock (CompleteTx, results, Then jobs, batch children);
// the queue stays urgent while a kept outcome holds its kind's claims.
func TestTakeRiders(t *testing.T) {
	fs := NewFaultStore(memstore.New())
	r := testRuntime(t, fs)
	as := claimAttempts(t, r, fs, "k", 7, time.Minute)
	batchChild := *as[4].attempt.job
	batchChild.Batch = uuid.Must(uuid.NewV7())
	as[4].attempt.job = &batchChild
	cps := make([]completion, len(as))
	for i, a := range as {
		cps[i] = completion{attempt: a.attempt, params: store.FinishParams{Lease: a.lease, Outcome: store.OutcomeSucceeded}}
	}
	cps[1].inTx = true
	cps[2].params.Result = []byte(`{}`)
	cps[3].params.Then = []store.InsertParams{{Kind: "then"}}
	cps[5].breakerHeld = true // a failure its kind's breaker counts: rides, and urgency goes with it
	cps[6].params.Outcome = store.OutcomeRetry

	for _, tc := range []struct {
		name       string
		cp         completion
		wantRiding bool
	}{
		{"plain success", cps[0], true},
		{"CompleteTx", cps[1], false},
		{"result", cps[2], false},
		{"Then jobs", cps[3], false},
		{"batch child", cps[4], false},
		{"retry", cps[6], true},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.wantRiding, rides(&tc.cp)) })
	}

	c := r.completer
	c.queue = append(c.queue, cps...)
	c.urgent = true
	riders := c.takeRiders()
	leases := func(cs []completion) []store.Lease {
		var ls []store.Lease
		for _, cp := range cs {
			ls = append(ls, cp.params.Lease)
		}
		return ls
	}
	require.Equal(t, []store.Lease{as[0].lease, as[5].lease, as[6].lease}, leases(riders))
	require.Equal(t, []store.Lease{as[1].lease, as[2].lease, as[3].lease, as[4].lease}, leases(c.queue))
	require.False(t, c.urgent, "no kept outcome holds its kind's claims")

	c.requeue(riders[1:2])
	require.Equal(t, []store.Lease{as[5].lease, as[1].lease, as[2].lease, as[3].lease, as[4].lease}, leases(c.queue))
	require.True(t, c.urgent, "a requeued outcome holds its kind's claims")
	require.Len(t, c.takeRiders(), 1, "only the requeued plain outcome rides again")
}
