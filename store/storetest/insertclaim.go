package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// insertClaimed calls InsertClaimed with p and a claim by owner for a lease
// of d, and requires success. The claim has an EarlyStart, which a store
// may call (store.EarlyStarter): at most once, only for a job it claims,
// with the record it returns.
func insertClaimed(t *testing.T, st store.Store, p store.InsertParams, d time.Duration) (store.InsertResult, *store.JobRecord) {
	t.Helper()
	early := &earlyStarts{}
	claim := &store.InsertClaim{Owner: owner, LeaseDuration: d, EarlyStart: early}
	res, rec, err := as[store.InsertClaimer](t, st).InsertClaimed(t.Context(), &p, claim)
	require.NoError(t, err)
	require.LessOrEqual(t, len(early.recs), 1, "StartEarly called more than once")
	if len(early.recs) == 1 {
		require.NotNil(t, rec, "StartEarly called for a job the store did not claim")
		require.Equal(t, rec, early.recs[0], "StartEarly's record is not the one returned")
	}
	return res, rec
}

// earlyStarts is a store.EarlyStarter that records what it is given.
type earlyStarts struct{ recs []*store.JobRecord }

func (e *earlyStarts) StartEarly(rec *store.JobRecord) { e.recs = append(e.recs, rec) }

// needsFlows skips a test when st is not a FlowStore.
func needsFlows(t *testing.T, st store.Store) { as[store.FlowStore](t, st) }

// needsFollowUps skips a test when st is not a FollowUpStore.
func needsFollowUps(t *testing.T, st store.Store) { as[store.FollowUpStore](t, st) }

// countsOf returns the counts of kind's jobs by state, when st is a
// Counter.
func countsOf(t *testing.T, st store.Store, kind string) (map[store.State]int64, bool) {
	t.Helper()
	c, ok := st.(store.Counter)
	if !ok {
		return nil, false
	}
	counts, err := c.CountJobs(t.Context())
	require.NoError(t, err)
	m := make(map[store.State]int64)
	for _, sc := range counts {
		if sc.Kind == kind {
			m[sc.State] += sc.Count
		}
	}
	return m, true
}

// testInsertClaimed checks the optional InsertClaimer: a plain due job of
// a kind with nothing due is claimed at insert, exactly as if inserted
// then claimed; anything a claim would have to decide (run_at ahead,
// delays, follow-ups, sequences, pending bounds, flow settings that hold
// claims, another due job of the kind) leaves it inserted for a claim;
// duplicates, notifications, lease expiry, validation and concurrent
// claimers.
func testInsertClaimed(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.InsertClaimer](t, newStore)

	t.Run("Claims", func(t *testing.T) {
		cases := []struct {
			name  string
			needs func(t *testing.T, st store.Store) // skips what the store cannot run
			// setup prepares the store before the insert of a job of kind.
			setup func(t *testing.T, st store.Store, kind string)
			mod   func(now time.Time) func(*store.InsertParams)
		}{
			{name: "EmptyKind"},
			{name: "PastRunAt", mod: func(now time.Time) func(*store.InsertParams) { return withRunAt(now.Add(-time.Minute)) }},
			{name: "HighPriority", mod: func(time.Time) func(*store.InsertParams) { return withPriority(store.PriorityHigh) }},
			{name: "OtherKindDue", setup: func(t *testing.T, st store.Store, _ string) {
				insertOne(t, st, "ic.other", withPriority(store.PriorityHigh))
				insertOne(t, st, "ic.other", withRunAt(storeNow(t, st).Add(-time.Hour)))
			}},
			{name: "SameKindNotDue", setup: func(t *testing.T, st store.Store, kind string) {
				insertOne(t, st, kind, notDue, withPriority(store.PriorityHigh))
			}},
			{name: "SameKindRunning", setup: func(t *testing.T, st store.Store, kind string) {
				makeJob(t, st, store.StateRunning, kind)
			}},
			{name: "SameKindPausedPastRunAt", setup: func(t *testing.T, st store.Store, kind string) {
				id := insertOne(t, st, kind, withRunAt(storeNow(t, st).Add(-time.Hour)))
				control(t, st, id, store.OpPause)
			}},
			{name: "SameKindFinal", setup: func(t *testing.T, st store.Store, kind string) {
				makeJob(t, st, store.StateSucceeded, kind)
				makeJob(t, st, store.StateDead, kind)
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				const kind = "ic"
				if c.needs != nil {
					c.needs(t, st)
				}
				if c.setup != nil {
					c.setup(t, st, kind)
				}
				countsBefore, counted := countsOf(t, st, kind)
				before := storeNow(t, st)
				p := params(t, kind, withMetadata(map[string]string{"m": "v"}))
				if c.mod != nil {
					c.mod(before)(&p)
				}
				res, rec := insertClaimed(t, st, p, longLease)
				after := storeNow(t, st)
				require.Equal(t, store.InsertResult{ID: p.ID}, res)
				require.NotNil(t, rec, "not claimed")

				require.Equal(t, p.ID, rec.ID)
				require.Equal(t, kind, rec.Kind)
				require.Equal(t, store.StateRunning, rec.State)
				require.Equal(t, owner, rec.Owner)
				require.Equal(t, 1, rec.Attempt)
				require.NotEqual(t, uuid.Nil, rec.LeaseToken)
				require.False(t, rec.CancelRequested)
				require.False(t, rec.PauseRequested)
				requireBetween(t, before, after, rec.CreatedAt, "CreatedAt")
				requireBetween(t, before, after, rec.AttemptedAt, "AttemptedAt")
				requireTimeNear(t, rec.AttemptedAt.Add(longLease), rec.LeaseExpiresAt, storedTolerance, "LeaseExpiresAt")
				if p.RunAt.IsZero() {
					requireBetween(t, before, after, rec.RunAt, "RunAt")
				} else {
					requireTimeNear(t, p.RunAt, rec.RunAt, storedTolerance, "RunAt")
				}
				requireTimeNear(t, rec.RunAt, rec.ScheduledAt, storedTolerance, "ScheduledAt")
				require.Empty(t, rec.PartitionKey)
				requireSameRecord(t, rec, get(t, st, p.ID), "Get agrees")

				// Indistinguishable from a job inserted, then claimed.
				refP := p
				refP.ID, refP.Kind = newID(t), "ic.ref"
				ref := claimOnly(t, st, "ic.ref", insert(t, st, refP)[0], longLease)
				want := *ref
				want.ID, want.Kind, want.LeaseToken, want.PartitionKey = rec.ID, rec.Kind, rec.LeaseToken, rec.PartitionKey
				want.RunAt, want.ScheduledAt, want.CreatedAt = rec.RunAt, rec.ScheduledAt, rec.CreatedAt
				want.AttemptedAt, want.LeaseExpiresAt = rec.AttemptedAt, rec.LeaseExpiresAt
				requireSameRecord(t, &want, rec, "as a job inserted then claimed")

				if counted {
					countsBefore[store.StateRunning]++
					counts, _ := countsOf(t, st, kind)
					require.Equal(t, countsBefore, counts, "counts: one more running job")
				}

				require.NotContains(t, claimIDs(claim(t, st, claimParams(10, longLease, kind))), p.ID, "claimed twice")
				ext, err := st.ExtendLeases(t.Context(), &store.ExtendParams{Leases: []store.Lease{lease(rec)}, Duration: longLease})
				require.NoError(t, err)
				require.Empty(t, ext.Lost, "lease lost")
				done := finishOne(t, st, rec, store.FinishParams{Outcome: store.OutcomeSucceeded})
				require.Equal(t, store.StateSucceeded, done.State)
				require.Equal(t, 1, done.Attempt)
			})
		}
	})

	t.Run("NotClaimed", func(t *testing.T) {
		cases := []struct {
			name  string
			needs func(t *testing.T, st store.Store)
			// setup prepares the store before the insert of a job of kind
			// and returns the jobs of kind a claim takes with it.
			setup func(t *testing.T, st store.Store, kind string) []uuid.UUID
			mod   func(now time.Time) func(*store.InsertParams)
			// runNow makes the job due (run it now) before the claim.
			runNow bool
		}{
			{name: "RunAtAhead", mod: func(now time.Time) func(*store.InsertParams) { return withRunAt(now.Add(farFuture)) }, runNow: true},
			{name: "Delay", mod: func(time.Time) func(*store.InsertParams) { return withDelay(farFuture) }, runNow: true},
			{name: "SameKindDue", setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				return []uuid.UUID{insertOne(t, st, kind)}
			}},
			{name: "SameKindDueLowerPriority", setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				return []uuid.UUID{insertOne(t, st, kind, withPriority(store.PriorityLow))}
			}, mod: func(time.Time) func(*store.InsertParams) { return withPriority(store.PriorityHigh) }},
			{name: "SameKindDueHigherPriority", setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				return []uuid.UUID{insertOne(t, st, kind, withPriority(store.PriorityHigh))}
			}, mod: func(time.Time) func(*store.InsertParams) { return withPriority(store.PriorityLow) }},
			{name: "SameKindRetryingDue", setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				j := makeJob(t, st, store.StateRunning, kind)
				finishOne(t, st, j, store.FinishParams{Outcome: store.OutcomeRetry, Error: "boom"})
				return []uuid.UUID{j.ID}
			}},
			{name: "FollowUps", needs: needsFollowUps, mod: func(time.Time) func(*store.InsertParams) {
				return withFollowUps(followUpTo("ic", store.StateSucceeded))
			}},
			{name: "SequenceKey", needs: needsFlows, mod: func(time.Time) func(*store.InsertParams) { return withSequence("s") }},
			{name: "PendingLimit", needs: needsFlows, mod: func(time.Time) func(*store.InsertParams) {
				return func(p *store.InsertParams) { p.PendingLimit = 100 }
			}},
			{name: "Concurrency", needs: needsFlows, setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				setFlows(t, st, store.FlowConfig{Kind: kind, Concurrency: 1})
				return nil
			}},
			{name: "MaxPending", needs: needsFlows, setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				setFlows(t, st, store.FlowConfig{Kind: kind, MaxPending: 10})
				return nil
			}},
			{name: "PartitionSource", needs: needsFlows, setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				setFlows(t, st, store.FlowConfig{Kind: kind, Partition: store.PartitionSource{PayloadField: "n"}})
				return nil
			}},
			{name: "PartitionConcurrency", needs: needsFlows, setup: func(t *testing.T, st store.Store, kind string) []uuid.UUID {
				setFlows(t, st, store.FlowConfig{Kind: kind, Partition: store.PartitionSource{PayloadField: "n"}, PartitionConcurrency: 1})
				return nil
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				const kind = "ic"
				if c.needs != nil {
					c.needs(t, st)
				}
				var others []uuid.UUID
				if c.setup != nil {
					others = c.setup(t, st, kind)
				}
				p := params(t, kind)
				if c.mod != nil {
					c.mod(storeNow(t, st))(&p)
				}
				res, rec := insertClaimed(t, st, p, longLease)
				require.Equal(t, store.InsertResult{ID: p.ID}, res)
				require.Nil(t, rec, "claimed")
				j := get(t, st, p.ID)
				require.Equal(t, store.StateScheduled, j.State)
				require.Zero(t, j.Attempt)
				require.Empty(t, j.Owner)
				requireLeaseCleared(t, j)
				require.True(t, j.AttemptedAt.IsZero(), "AttemptedAt set: %s", j.AttemptedAt)

				if c.runNow {
					control(t, st, p.ID, store.OpRunNow)
				}
				got := claim(t, st, claimParams(10, longLease, kind))
				require.ElementsMatch(t, append(others, p.ID), claimIDs(got), "a claim takes it")
			})
		}
	})

	t.Run("Duplicate", func(t *testing.T) {
		cases := []struct {
			name   string
			holder func(t *testing.T, st store.Store) *store.JobRecord
			scope  store.UniqueScope
		}{
			{"ScheduledNotDue", func(t *testing.T, st store.Store) *store.JobRecord {
				return makeJob(t, st, store.StateScheduled, "ic", withUnique("k", perKind))
			}, perKind},
			{"Running", func(t *testing.T, st store.Store) *store.JobRecord {
				return makeJob(t, st, store.StateRunning, "ic", withUnique("k", perKind))
			}, perKind},
			{"SucceededFinishedScope", func(t *testing.T, st store.Store) *store.JobRecord {
				return makeJob(t, st, store.StateSucceeded, "ic", withUnique("k", finished))
			}, finished},
			{"GlobalOtherKind", func(t *testing.T, st store.Store) *store.JobRecord {
				return makeJob(t, st, store.StateRunning, "ic.other", withUnique("k", global))
			}, global},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				holder := c.holder(t, st)
				p := params(t, "ic", withUnique("k", c.scope))
				res, rec := insertClaimed(t, st, p, longLease)
				require.Equal(t, store.InsertResult{ID: holder.ID, Duplicate: true}, res)
				require.Nil(t, rec, "a duplicate is never claimed")
				requireNotFound(t, st, p.ID)
				requireUnchanged(t, st, holder)
			})
		}
	})

	t.Run("Notifications", func(t *testing.T) {
		st := newStore(t)
		n := as[store.Notifier](t, st)
		waiting := insertOne(t, st, "ic.busy")
		rec := newRecorder()
		unsubscribe := n.Subscribe(rec.record)
		t.Cleanup(unsubscribe)

		_, claimed := insertClaimed(t, st, params(t, "ic.quiet"), longLease)
		require.NotNil(t, claimed, "not claimed")
		busy := params(t, "ic.busy")
		_, r := insertClaimed(t, st, busy, longLease)
		require.Nil(t, r, "claimed ahead of a due job")
		later := params(t, "ic.later", withDelay(10*time.Minute))
		_, r = insertClaimed(t, st, later, longLease)
		require.Nil(t, r, "claimed before its run_at")

		rec.waitFor(t, "for the unclaimed due job", notifiesRunAt("ic.busy", get(t, st, busy.ID).RunAt))
		rec.waitFor(t, "for the unclaimed job ahead", notifiesRunAt("ic.later", get(t, st, later.ID).RunAt))
		for _, note := range rec.recorded() {
			require.NotEqual(t, "ic.quiet", note.Kind, "a claimed insert notified")
		}
		require.ElementsMatch(t, []uuid.UUID{waiting, busy.ID}, claimIDs(claim(t, st, claimParams(10, longLease, "ic.busy"))))
	})

	t.Run("LeaseExpiry", func(t *testing.T) {
		st := newStore(t)
		p := params(t, "ic", withMaxAttempts(2))
		_, rec := insertClaimed(t, st, p, shortLease)
		require.NotNil(t, rec, "not claimed")
		waitUntilStoreTime(t, st, rec.LeaseExpiresAt)

		rescued, err := st.RescueExpired(t.Context(), 10)
		require.NoError(t, err)
		require.Equal(t, []store.Rescued{{ID: p.ID, Kind: "ic", Owner: owner, Attempt: 1, State: store.StateRetrying}}, rescued)
		got := get(t, st, p.ID)
		require.Equal(t, store.StateRetrying, got.State)
		requireLeaseCleared(t, got)
		require.Len(t, got.Errors, 1)
		require.Contains(t, got.Errors[0].Error, leaseExpiredError)
		require.Equal(t, []bool{false}, finish(t, st, outcome(rec, store.OutcomeSucceeded)), "the expired lease is lost")

		again := claimOnly(t, st, "ic", p.ID, longLease)
		require.Equal(t, 2, again.Attempt)
		require.Greater(t, again.Fence, rec.Fence)
	})

	t.Run("Invalid", func(t *testing.T) {
		valid := &store.InsertClaim{Owner: owner, LeaseDuration: longLease}
		cases := []struct {
			name  string
			mod   func(*store.InsertParams)
			claim *store.InsertClaim
		}{
			{"NilClaim", nil, nil},
			{"ZeroLease", nil, &store.InsertClaim{Owner: owner}},
			{"NegativeLease", nil, &store.InsertClaim{Owner: owner, LeaseDuration: -time.Second}},
			{"OwnerWithNUL", nil, &store.InsertClaim{Owner: "node\x00", LeaseDuration: longLease}},
			{"OwnerTooLong", nil, &store.InsertClaim{Owner: strings.Repeat("o", store.MaxKindLength+1), LeaseDuration: longLease}},
			{"EmptyKind", func(p *store.InsertParams) { p.Kind = "" }, valid},
			{"NoID", func(p *store.InsertParams) { p.ID = uuid.Nil }, valid},
			{"BadPriority", func(p *store.InsertParams) { p.Priority = 7 }, valid},
			{"BadPayload", func(p *store.InsertParams) { p.Payload = []byte("{") }, valid},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				p := params(t, "ic")
				id := p.ID
				if c.mod != nil {
					c.mod(&p)
				}
				res, rec, err := as[store.InsertClaimer](t, st).InsertClaimed(t.Context(), &p, c.claim)
				require.ErrorIs(t, err, store.ErrInvalidParams)
				require.Nil(t, rec)
				require.Zero(t, res)
				requireNotFound(t, st, id)
				if counts, ok := countsOf(t, st, p.Kind); ok {
					require.Empty(t, counts, "something was inserted")
				}
			})
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Inserts that claim race claimers: every job runs exactly once.
		st := newStore(t)
		const inserters, perInserter, claimers = 4, 25, 3
		total := inserters * perInserter
		var (
			mu    sync.Mutex
			seen  = make(map[uuid.UUID]int)
			count int
		)
		took := func(ids ...uuid.UUID) {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				seen[id]++
				count++
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, inserters+claimers)
		for range inserters {
			wg.Go(func() {
				ic := st.(store.InsertClaimer)
				for range perInserter {
					id, err := uuid.NewV7()
					if err != nil {
						errs <- err
						return
					}
					p := store.InsertParams{ID: id, Kind: "ic", Priority: store.PriorityNormal, MaxAttempts: 1}
					_, rec, err := ic.InsertClaimed(t.Context(), &p, &store.InsertClaim{Owner: owner, LeaseDuration: longLease})
					if err != nil {
						errs <- err
						return
					}
					if rec != nil {
						took(rec.ID)
					}
				}
			})
		}
		deadline := time.Now().Add(waitTimeout)
		for range claimers {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					mu.Lock()
					finished := count >= total
					mu.Unlock()
					if finished {
						return
					}
					res, err := st.Claim(t.Context(), claimParams(5, longLease, "ic"))
					if err != nil {
						errs <- err
						return
					}
					took(claimIDs(res)...)
					if len(res.Jobs) == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, seen, total, "every job claimed")
		for id, n := range seen {
			require.Equal(t, 1, n, "job %s claimed %d times", id, n)
		}
	})
}
