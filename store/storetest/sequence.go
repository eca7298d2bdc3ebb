package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testFlowSequence checks sequences (InsertParams.SequenceKey): one job
// of a kind and key at a time, in (ScheduledAt, ID) order whatever the
// insert order, keys and kinds independent, a failed first job holding
// the rest until it ends, a paused one holding them, a cancelled or dead
// one letting them go, the next job's notification, and many claimers at
// once.
func testFlowSequence(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	t.Run("Order", func(t *testing.T) {
		st := newStore(t)
		now := storeNow(t, st)
		// Inserted latest first: scheduled order is by ScheduledAt.
		var want []uuid.UUID
		for i := range 4 {
			want = append([]uuid.UUID{insertOne(t, st, "fs", withSequence("s"), withRunAt(now.Add(-time.Duration(i+1)*time.Second)))}, want...)
		}
		other := insertOne(t, st, "fs", withSequence("t"))
		otherKind := insertOne(t, st, "fs.b", withSequence("s"))
		plain := insertOne(t, st, "fs")
		var got []uuid.UUID
		for i := range want {
			res := claim(t, st, claimParams(100, longLease, "fs", "fs.b"))
			ids := claimIDs(res)
			require.Contains(t, ids, want[i], "step %d", i)
			if i == 0 {
				require.ElementsMatch(t, []uuid.UUID{want[0], other, otherKind, plain}, ids, "one per kind and key")
			} else {
				require.Len(t, ids, 1, "step %d", i)
			}
			got = append(got, want[i])
			require.True(t, res.NextRunAt.IsZero(), "the rest wait for the running one: %s", res.NextRunAt)
			require.Empty(t, claim(t, st, claimParams(100, longLease, "fs")).Jobs)
			for _, j := range res.Jobs {
				if j.ID == want[i] {
					require.Equal(t, "s", j.SequenceKey)
					finish(t, st, outcome(j, store.OutcomeSucceeded))
				}
			}
		}
		require.Equal(t, want, got)
	})
	t.Run("HoldsAndReleases", func(t *testing.T) {
		cases := []struct {
			name string
			// end ends the first job, claimed as first; it reports whether
			// the second may start now.
			end func(t *testing.T, st store.Store, first *store.JobRecord) bool
		}{
			{"Retrying", func(t *testing.T, st store.Store, first *store.JobRecord) bool {
				finish(t, st, store.FinishParams{Lease: lease(first), Outcome: store.OutcomeRetry, Delay: farFuture, Error: "x"})
				return false
			}},
			{"Snoozed", func(t *testing.T, st store.Store, first *store.JobRecord) bool {
				finish(t, st, store.FinishParams{Lease: lease(first), Outcome: store.OutcomeSnooze, Delay: farFuture})
				return false
			}},
			{"Dead", func(t *testing.T, st store.Store, first *store.JobRecord) bool {
				finish(t, st, outcome(first, store.OutcomeDead))
				return true
			}},
			{"PausedThenCancelled", func(t *testing.T, st store.Store, first *store.JobRecord) bool {
				finish(t, st, outcome(first, store.OutcomeRetry))
				control(t, st, first.ID, store.OpPause)
				require.Empty(t, claim(t, st, claimParams(10, longLease, "fs")).Jobs, "a paused first job holds the rest")
				control(t, st, first.ID, store.OpCancel)
				return true
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				now := storeNow(t, st)
				insertOne(t, st, "fs", withSequence("s"), withRunAt(now.Add(-2*time.Second)))
				second := insertOne(t, st, "fs", withSequence("s"), withRunAt(now.Add(-time.Second)))
				first := claim(t, st, claimParams(10, longLease, "fs")).Jobs
				require.Len(t, first, 1)
				free := c.end(t, st, first[0])
				ids := claimIDs(claim(t, st, claimParams(10, longLease, "fs")))
				if free {
					require.Equal(t, []uuid.UUID{second}, ids)
				} else {
					require.Empty(t, ids)
				}
			})
		}
	})
	t.Run("EarlierArrival", func(t *testing.T) {
		// A job scheduled before the running one, inserted after it
		// started, waits for it.
		st := newStore(t)
		now := storeNow(t, st)
		insertOne(t, st, "fs", withSequence("s"))
		running := claim(t, st, claimParams(10, longLease, "fs"))
		require.Len(t, running.Jobs, 1)
		early := insertOne(t, st, "fs", withSequence("s"), withRunAt(now.Add(-time.Hour)))
		require.Empty(t, claim(t, st, claimParams(10, longLease, "fs")).Jobs)
		finish(t, st, outcome(running.Jobs[0], store.OutcomeSucceeded))
		require.Equal(t, []uuid.UUID{early}, claimIDs(claim(t, st, claimParams(10, longLease, "fs"))))
	})
	t.Run("NextNotifies", func(t *testing.T) {
		st := newStore(t)
		n := as[store.Notifier](t, st)
		insertOne(t, st, "fs", withSequence("s"))
		second := insertOne(t, st, "fs", withSequence("s"))
		first := claim(t, st, claimParams(10, longLease, "fs")).Jobs[0]
		rec := newRecorder()
		unsubscribe := n.Subscribe(rec.record)
		defer unsubscribe()
		finish(t, st, outcome(first, store.OutcomeSucceeded))
		// The notification says from when the kind has due work (the
		// finish's time, which may be seconds after the insert on a slow
		// machine): at or after the next job's run_at, so that a claim it
		// wakes finds the job due.
		next := get(t, st, second).RunAt
		rec.waitFor(t, "for the sequence's next job", func(n store.Notification) bool {
			return n.Kind == "fs" && !n.RunAt.IsZero() && !n.RunAt.Before(next.Add(-clockTolerance))
		})
	})
	t.Run("Concurrent", func(t *testing.T) {
		st := newStore(t)
		const keys, per = 5, 20
		ps := make([]store.InsertParams, 0, keys*per)
		now := storeNow(t, st)
		for i := range per {
			for k := range keys {
				ps = append(ps, params(t, "fs", withSequence(fmt.Sprint("key-", k)), withRunAt(now.Add(time.Duration(i-per)*time.Millisecond))))
			}
		}
		insert(t, st, ps...)
		order := make(map[uuid.UUID]int, len(ps))
		for i, p := range ps {
			order[p.ID] = i
		}
		var (
			mu      sync.Mutex
			running = make(map[string]bool)
			last    = make(map[string]int)
			done    int
			wg      sync.WaitGroup
		)
		ctx := ctxTimeout(t)
		for range 6 {
			// Each claimer holds what it claimed and finishes one job per
			// round, so claims race with running jobs of every key.
			wg.Go(func() {
				var held []*store.JobRecord
				for ctx.Err() == nil {
					res, err := st.Claim(ctx, claimParams(2, longLease, "fs"))
					if !assertNoError(t, err) {
						return
					}
					held = append(held, res.Jobs...)
					mu.Lock()
					for _, j := range res.Jobs {
						if running[j.SequenceKey] {
							t.Errorf("two jobs of key %s run at once", j.SequenceKey)
						}
						if prev, ok := last[j.SequenceKey]; ok && order[j.ID] < prev {
							t.Errorf("key %s ran job %d after job %d", j.SequenceKey, order[j.ID], prev)
						}
						running[j.SequenceKey], last[j.SequenceKey] = true, order[j.ID]
					}
					finished := done
					mu.Unlock()
					if finished == len(ps) {
						return
					}
					if len(held) == 0 {
						continue
					}
					j := held[0]
					held = held[1:]
					mu.Lock()
					running[j.SequenceKey] = false
					done++
					mu.Unlock()
					if _, err := st.Finish(ctx, []store.FinishParams{outcome(j, store.OutcomeSucceeded)}); !assertNoError(t, err) {
						return
					}
				}
			})
		}
		wg.Wait()
		require.Equal(t, len(ps), done)
	})
}

// testFlowAging checks priority aging (ClaimParams.AgeAfter): jobs due
// for at least AgeAfter come first, oldest first whatever their priority;
// the others keep strict priority; without AgeAfter priority is strict.
func testFlowAging(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.FlowStore](t, newStore)
	st := newStore(t)
	now := storeNow(t, st)
	high := insertOne(t, st, "fa", withPriority(store.PriorityHigh), withRunAt(now.Add(-time.Second)))
	normal := insertOne(t, st, "fa", withPriority(store.PriorityNormal), withRunAt(now.Add(-time.Second)))
	oldLow := insertOne(t, st, "fa", withPriority(store.PriorityLow), withRunAt(now.Add(-time.Hour)))
	olderNormal := insertOne(t, st, "fa", withPriority(store.PriorityNormal), withRunAt(now.Add(-2*time.Hour)))
	agedHigh := insertOne(t, st, "fa", withPriority(store.PriorityHigh), withRunAt(now.Add(-30*time.Minute)))

	strict := claimParams(1, longLease, "fa")
	peek := func(p *store.ClaimParams) uuid.UUID {
		res := claim(t, st, p)
		require.Len(t, res.Jobs, 1)
		finish(t, st, store.FinishParams{Lease: lease(res.Jobs[0]), Outcome: store.OutcomeRelease}) // back, due at store now
		return res.Jobs[0].ID
	}
	require.Equal(t, agedHigh, peek(strict), "without aging, High first (oldest High)")

	aged := claimParams(10, longLease, "fa")
	aged.AgeAfter = 10 * time.Minute
	// agedHigh was released: its run_at is now; the aged jobs are the old
	// Normal and the old Low, oldest first, then the rest by priority.
	res := claim(t, st, aged)
	require.Equal(t, []uuid.UUID{olderNormal, oldLow, high, agedHigh, normal}, claimIDs(res))
}
