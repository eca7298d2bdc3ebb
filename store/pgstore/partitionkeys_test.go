package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestTemplatePartitionKeyRefusedGoesToNone: a job the database inserts
// from a template (here a Then job) whose key store.PartitionKeyOf would
// refuse (a NUL, or longer than store.MaxPartitionKeyLength) cannot
// refuse the finish that inserts it: ax_partition_key (migration 0016)
// puts it in the partition "", as pgstore's package doc says, and the
// finish applies.
func TestTemplatePartitionKeyRefusedGoesToNone(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t)
	require.NoError(t, s.SetFlows(ctx, &store.SetFlowsParams{Node: "n", Flows: []store.FlowConfig{
		{Kind: "then", Partition: store.PartitionSource{PayloadField: "c"}, PartitionConcurrency: 1}}}))
	cases := []struct {
		name    string
		payload string
		want    string
	}{
		{"NUL", `{"c":"a\u0000b"}`, ""},
		{"Overlong", `{"c":"` + strings.Repeat("x", store.MaxPartitionKeyLength+1) + `"}`, ""},
		{"Longest", `{"c":"` + strings.Repeat("x", store.MaxPartitionKeyLength) + `"}`, strings.Repeat("x", store.MaxPartitionKeyLength)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "parent", Payload: []byte(`{}`),
				Priority: store.PriorityNormal, MaxAttempts: 1}
			_, err := s.Insert(ctx, []store.InsertParams{parent})
			require.NoError(t, err)
			res, err := s.Claim(ctx, &store.ClaimParams{Owner: "o", Limit: 1, LeaseDuration: time.Minute,
				Kinds: []store.KindLimit{{Kind: "parent", Limit: 1}}})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			then := store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "then", Payload: []byte(c.payload),
				Priority: store.PriorityNormal, MaxAttempts: 1}
			ok, err := s.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: parent.ID, Token: res.Jobs[0].LeaseToken},
				Outcome: store.OutcomeSucceeded, Then: []store.InsertParams{then}}})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
			got, err := s.Get(ctx, then.ID)
			require.NoError(t, err)
			require.Equal(t, c.want, got.PartitionKey)
		})
	}
}
