package ax_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// ridingStore is a FaultStore that also takes outcomes with claims
// (store.FinishClaimer), by its Finish then its Claim, and can be made to
// fail those calls the ways the contract allows.
type ridingStore struct {
	*ax.FaultStore
	mode ridingMode

	mu   sync.Mutex
	rows int // outcomes FinishClaim calls were given
	// written counts each outcome written, by whichever call wrote it.
	written map[uuid.UUID]int
}

type ridingMode int

const (
	rideWrites  ridingMode = iota // both parts made
	rideFails                     // nothing written, nothing claimed, an error
	ridePartial                   // the claim made, half the outcomes written, an error
)

var errRide = errors.New("ride failed")

func newRidingStore(mode ridingMode) *ridingStore {
	rs := &ridingStore{FaultStore: ax.NewFaultStore(newMemstore()), mode: mode, written: map[uuid.UUID]int{}}
	rs.SetAfterFinish(func(_ context.Context, params []store.FinishParams, ok []bool) {
		rs.count(params, ok)
	})
	return rs
}

func (rs *ridingStore) count(params []store.FinishParams, ok []bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i, p := range params {
		if ok[i] {
			rs.written[p.Lease.ID]++
		}
	}
}

// FinishClaim implements store.FinishClaimer.
func (rs *ridingStore) FinishClaim(ctx context.Context, finish []store.FinishParams, claim *store.ClaimParams) (*store.FinishResult, *store.ClaimResult, error) {
	rs.mu.Lock()
	rs.rows += len(finish)
	rs.mu.Unlock()
	fr := &store.FinishResult{OK: make([]bool, len(finish))}
	switch rs.mode {
	case rideFails:
		return nil, nil, errRide
	case ridePartial:
		half := finish[:len(finish)/2]
		ok, err := rs.Finish(ctx, half)
		if err != nil {
			return nil, nil, err
		}
		copy(fr.OK, ok)
		res, err := rs.Claim(ctx, claim)
		if err != nil {
			return fr, nil, err
		}
		return fr, res, errRide
	}
	ok, err := rs.Finish(ctx, finish)
	if err != nil {
		return nil, nil, err
	}
	fr.OK = ok
	res, err := rs.Claim(ctx, claim)
	if err != nil {
		return fr, nil, err
	}
	return fr, res, nil
}

// TestOutcomesRideWithBacklogClaims: with a backlog of jobs and
// Config.OutcomesWithClaims, outcomes go to the store with the claims, and however the ride ends (written, failed
// before anything, failed after its claim) every job runs once and its
// outcome is written once, none reported as a lost lease.
func TestOutcomesRideWithBacklogClaims(t *testing.T) {
	const n = 300
	for _, tc := range []struct {
		name string
		mode ridingMode
		off  bool // Config.OutcomesWithClaims left false: nothing rides
	}{
		{"Written", rideWrites, false},
		{"Fails", rideFails, false},
		{"Partial", ridePartial, false},
		{"Off", rideWrites, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := newRidingStore(tc.mode)
			done := newEventCounter(ax.EventSucceeded)
			lost := newEventCounter(ax.EventLeaseLost)
			s := newScheduler(t, rs, func(c *ax.Config) {
				c.Workers = 4
				c.OutcomesWithClaims = !tc.off
				c.Observers = []ax.Observer{done, lost}
			})
			var ran sync.Map
			var runs atomic.Int64
			require.NoError(t, s.Handle("k", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
				runs.Add(1)
				_, twice := ran.LoadOrStore(j.ID, true)
				if twice {
					t.Errorf("job %s ran twice", j.ID)
				}
				return nil
			})))
			scheduleN(t, s, "k", n)
			start(t, s)
			done.waitFor(t, n)
			require.Equal(t, int64(n), runs.Load())

			rs.mu.Lock()
			defer rs.mu.Unlock()
			if tc.off {
				require.Zero(t, rs.rows, "outcomes rode with claims while OutcomesWithClaims is off")
			} else {
				require.Positive(t, rs.rows, "no outcome rode with a claim")
			}
			require.Len(t, rs.written, n)
			for id, k := range rs.written {
				require.Equal(t, 1, k, "outcome of %s written %d times", id, k)
			}
			lost.mu.Lock()
			require.Zero(t, lost.n, "outcomes reported as lost leases")
			lost.mu.Unlock()
		})
	}
}
