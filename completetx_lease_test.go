package ax_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// commitTx stands for a handler's database transaction in tests: the
// CompleteTx of a commitStore applies at once, as if the transaction had
// committed right after the call.
type commitTx struct{}

// commitStore is a memstore whose CompleteTx takes a commitTx and which
// tells a test about every lease extension once it returned.
type commitStore struct {
	*memstore.Store
	extended chan *store.ExtendResult
}

// CompleteTx writes the success at once (the "transaction" commits).
func (s *commitStore) CompleteTx(ctx context.Context, _ commitTx, p store.FinishParams) (bool, error) {
	ok, err := s.Finish(ctx, []store.FinishParams{p})
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// ExtendLeases extends and then reports the result on s.extended, without
// blocking when nobody listens.
func (s *commitStore) ExtendLeases(ctx context.Context, p *store.ExtendParams) (*store.ExtendResult, error) {
	res, err := s.Store.ExtendLeases(ctx, p)
	if err == nil {
		select {
		case s.extended <- res:
		default:
		}
	}
	return res, err
}

// TestCompleteTxCommittedThenExtendedIsNotLost: a handler's CompleteTx
// committed, and the host's lease extension runs before the handler
// returns. The store reports the lease finished by its own outcome; the
// host must not call it lost (issue 23, defect 3: it logged ERROR "job
// lease lost; handler cancelled and its result will be discarded" and
// emitted EventLeaseLost for a job that succeeded once), must not cancel
// the handler, and reports the success.
func TestCompleteTxCommittedThenExtendedIsNotLost(t *testing.T) {
	st := &commitStore{Store: memstore.New(), extended: make(chan *store.ExtendResult, 1)}
	lostEvents := newEventCounter(ax.EventLeaseLost)
	succeeded := newEventCounter(ax.EventSucceeded)
	s := newScheduler(t, st, func(c *ax.Config) {
		c.LeaseDuration = 300 * time.Millisecond // heartbeat every 100ms
		c.Observers = []ax.Observer{lostEvents, succeeded}
	})
	handlerErr := make(chan error, 1)
	require.NoError(t, ax.Handle(s, "txjob", func(ctx context.Context, j *ax.Job, _ json.RawMessage) error {
		if err := ax.CompleteTxOf(ctx, s, commitTx{}); err != nil {
			return err
		}
		// Wait, after the commit, for three extensions (at least two
		// began after it) and for longer than a lease, so that the host's
		// own "not extended for LeaseDuration" check runs too.
		deadline := time.After(2 * 300 * time.Millisecond)
		for range 3 {
			select {
			case <-st.extended:
			case <-time.After(30 * time.Second):
				handlerErr <- context.DeadlineExceeded
				return nil
			}
		}
		<-deadline
		handlerErr <- context.Cause(ctx)
		return nil
	}))
	start(t, s)
	res, err := s.Schedule(t.Context(), "txjob", map[string]any{})
	require.NoError(t, err)
	require.NoError(t, recvErr(t, handlerErr), "the handler was cancelled after its CompleteTx committed")
	succeeded.waitFor(t, 1)
	rec, err := st.Get(t.Context(), res.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateSucceeded, rec.State)
	require.Equal(t, 1, rec.Attempt)
	lostEvents.mu.Lock()
	defer lostEvents.mu.Unlock()
	require.Zero(t, lostEvents.n, "EventLeaseLost for a job that succeeded with its own lease")
}

// recvErr receives one error from ch, failing the test after a generous
// deadline.
func recvErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("timed out waiting for the handler")
		return nil
	}
}
