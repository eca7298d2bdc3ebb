package ax

import (
	"context"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// slowClaimStore is a store whose claims take a round trip (claimTook)
// and that records how many slots each claim asked for.
type slowClaimStore struct {
	store.Store
	mu     sync.Mutex
	limits []int
}

const claimTook = 2 * time.Millisecond

func (s *slowClaimStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	s.mu.Lock()
	s.limits = append(s.limits, p.Limit)
	s.mu.Unlock()
	time.Sleep(claimTook)
	return s.Store.Claim(ctx, p)
}

// TestClaimTakesTheSlotsOfJobsJustLaunched: with handlers that return at
// once, each claim asks for (nearly) every worker slot, not for the half
// that the jobs of the previous claim left while their goroutines had
// not yet run (letLaunchedRun). Without the wait, the claims settle
// into two alternating halves of the workers.
func TestClaimTakesTheSlotsOfJobsJustLaunched(t *testing.T) {
	// On one processor the launched goroutines run only when the claim
	// loop waits, so the slots a claim asks for do not depend on how
	// the machine schedules two: 50 of 50 with the wait, 25 without.
	// Not parallel: the setting is the process's.
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		const workers, jobs = 50, 5000
		st := &slowClaimStore{Store: memstore.New()}
		r := testRuntime(t, st, func(c *Config) {
			c.Workers = workers
			c.PollInterval = time.Hour
			c.FlushInterval = 10 * time.Microsecond // outcomes never hold slots for long
		})
		for range jobs {
			insertAt(t, st, "quick", time.Time{})
		}
		startClaimer(t, r, "quick")
		r.wake()
		time.Sleep(time.Second) // every job claimed: 100 claims or more of 2 ms
		synctest.Wait()
		st.mu.Lock()
		limits := slices.Clone(st.limits)
		st.mu.Unlock()
		require.GreaterOrEqual(t, len(limits), jobs/workers)
		// The second half of the claims made while jobs remained: past
		// the first claims, whose jobs' goroutines meet the completer's
		// first flush.
		steady := limits[jobs/workers/2 : jobs/workers]
		sum := 0
		for _, n := range steady {
			sum += n
		}
		require.GreaterOrEqual(t, sum, len(steady)*workers*9/10, "slots asked for per claim: %v", limits)
	})
}

// TestLetLaunchedRunWaitsAtMostMaxLaunchWait: the claim loop's wait for
// the goroutines of the jobs it launched ends when the last one runs,
// and after maxLaunchWait when one does not get to run (handlers that
// compute without blocking hold every processor); a signal left from a
// round nobody waited for does not end it early.
func TestLetLaunchedRunWaitsAtMostMaxLaunchWait(t *testing.T) {
	cases := []struct {
		name     string
		starting int64
		stale    bool // a signal from an earlier round is pending
		runs     bool // the launched goroutine runs (after 100 µs)
		want     time.Duration
	}{
		{"nothing launched", 0, false, false, 0},
		{"nothing launched, stale signal", 0, true, false, 0},
		{"the launched goroutine runs", 1, false, true, 100 * time.Microsecond},
		{"it never runs", 1, false, false, maxLaunchWait},
		{"it never runs, stale signal", 1, true, false, maxLaunchWait},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := testRuntime(t, memstore.New())
				r.starting.Store(c.starting)
				if c.stale {
					r.launchedRan <- struct{}{}
				}
				if c.runs {
					go func() {
						time.Sleep(100 * time.Microsecond)
						if r.starting.Add(-1) == 0 {
							r.launchedRan <- struct{}{}
						}
					}()
				}
				wait := time.NewTimer(time.Hour)
				wait.Stop()
				began := time.Now()
				r.letLaunchedRun(wait)
				require.Equal(t, c.want, time.Since(began))
				synctest.Wait()
			})
		})
	}
}
