package axhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestSubmitGetsTheKindsOptions (issue 23, defect 5): a job submitted
// through the API, whose Scheduler handles nothing (as under ax serve),
// gets the MaxAttempts and priority of the kind's handler on the host
// that runs it, and dies after exactly that many attempts there. Before
// the fix it got Config.MaxAttempts (20) and Normal.
func TestSubmitGetsTheKindsOptions(t *testing.T) {
	st := memstore.New()
	worker, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = worker.Stop(ctx)
	})
	require.NoError(t, worker.Handle("charge", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return errors.New("card declined")
	}), ax.MaxAttempts(1), ax.Priority(ax.High)))
	require.NoError(t, worker.Start(t.Context()))

	f := newFixture(t, fixtureOptions{store: st})
	res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", `{"kind":"charge"}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
	var sub SubmitResponse
	require.NoError(t, json.Unmarshal(b, &sub))
	require.Equal(t, 1, sub.Job.MaxAttempts)
	require.Equal(t, store.PriorityHigh, sub.Job.Priority)

	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := st.Get(t.Context(), sub.ID)
		require.NoError(t, err)
		if rec.State == store.StateDead {
			require.Equal(t, 1, rec.Attempt)
			return
		}
		require.False(t, time.Now().After(deadline), "job %s still %s", sub.ID, rec.State)
		time.Sleep(2 * time.Millisecond)
	}
}
