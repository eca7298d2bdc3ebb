package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testInsert checks Insert: defaults, timing, round trips, validation and
// unique keys.
func testInsert(t *testing.T, newStore NewStoreFunc) {
	t.Run("Defaults", func(t *testing.T) {
		st := newStore(t)
		before := storeNow(t, st)
		p := params(t, "insert.defaults", withPriority(store.PriorityLow), withMaxAttempts(7), withUniqueKey("k1"))
		insert(t, st, p)
		after := storeNow(t, st)

		j := get(t, st, p.ID)
		require.Equal(t, "insert.defaults", j.Kind)
		require.Equal(t, store.StateScheduled, j.State)
		require.Equal(t, store.PriorityLow, j.Priority)
		require.Equal(t, 0, j.Attempt)
		require.Equal(t, 7, j.MaxAttempts)
		require.Equal(t, "k1", j.UniqueKey)
		require.Empty(t, j.Errors)
		require.Empty(t, j.Owner)
		require.False(t, j.CancelRequested)
		requireLeaseCleared(t, j)
		require.True(t, j.AttemptedAt.IsZero(), "AttemptedAt set before any claim")
		require.True(t, j.FinishedAt.IsZero(), "FinishedAt set on a live job")
		requireBetween(t, before, after, j.CreatedAt, "CreatedAt")
		requireBetween(t, before, after, j.RunAt, "RunAt with zero RunAt and Delay")
	})

	t.Run("Timing", func(t *testing.T) {
		st := newStore(t)
		now := storeNow(t, st).Truncate(time.Microsecond)
		cases := []struct {
			name  string
			mods  []func(*store.InsertParams)
			want  time.Time
			slack time.Duration
		}{
			{"RunAtFuture", []func(*store.InsertParams){withRunAt(now.Add(37 * time.Minute))}, now.Add(37 * time.Minute), storedTolerance},
			{"RunAtPast", []func(*store.InsertParams){withRunAt(now.Add(-3 * time.Hour))}, now.Add(-3 * time.Hour), storedTolerance},
			{"Delay", []func(*store.InsertParams){withDelay(2 * time.Hour)}, now.Add(2 * time.Hour), clockTolerance},
			{"RunAtWinsOverDelay", []func(*store.InsertParams){withRunAt(now.Add(5 * time.Minute)), withDelay(2 * time.Hour)}, now.Add(5 * time.Minute), storedTolerance},
			{"NonUTCRunAt", []func(*store.InsertParams){withRunAt(now.Add(time.Minute).In(time.FixedZone("X", 5*3600+1800)))}, now.Add(time.Minute), storedTolerance},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				id := insertOne(t, st, "insert.timing", c.mods...)
				requireTimeNear(t, c.want, get(t, st, id).RunAt, c.slack)
			})
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		st := newStore(t)
		cases := []struct {
			name         string
			payload      []byte
			metadata     map[string]string
			wantPayload  string
			wantMetadata map[string]string
		}{
			{"Object", []byte(`{"to":"a@b.c","n":[1,2,3],"nested":{"ok":true}}`), map[string]string{"trace": "00-abc-01", "tenant": "t1"}, `{"to":"a@b.c","n":[1,2,3],"nested":{"ok":true}}`, map[string]string{"trace": "00-abc-01", "tenant": "t1"}},
			{"Array", []byte(`[1,"two",null]`), nil, `[1,"two",null]`, nil},
			{"String", []byte(`"héllo ✓"`), map[string]string{"unicode": "ünï ✓", "empty": ""}, `"héllo ✓"`, map[string]string{"unicode": "ünï ✓", "empty": ""}},
			{"EmptyMetadataIsNil", []byte(`{}`), map[string]string{}, `{}`, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				p := params(t, "insert.roundtrip")
				p.Payload = c.payload
				p.Metadata = c.metadata
				insert(t, st, p)
				j := get(t, st, p.ID)
				require.JSONEq(t, c.wantPayload, string(j.Payload))
				require.Equal(t, c.wantMetadata, j.Metadata)
			})
		}
		t.Run("NilPayloadIsNull", func(t *testing.T) {
			p := params(t, "insert.roundtrip")
			p.Payload = nil
			insert(t, st, p)
			j := get(t, st, p.ID)
			require.JSONEq(t, "null", string(j.Payload))
		})
		t.Run("CopiesAreFresh", func(t *testing.T) {
			p := params(t, "insert.roundtrip")
			p.Metadata = map[string]string{"a": "1"}
			insert(t, st, p)
			p.Payload[0] = '['          // caller keeps modifying its params
			p.Metadata["a"] = "changed" // after the insert returned
			j := get(t, st, p.ID)
			require.JSONEq(t, `{"n":1}`, string(j.Payload))
			require.Equal(t, map[string]string{"a": "1"}, j.Metadata)
			j.Metadata["a"] = "mutated" // and modifies what Get returned
			j.Payload[0] = '['
			j2 := get(t, st, p.ID)
			require.JSONEq(t, `{"n":1}`, string(j2.Payload))
			require.Equal(t, map[string]string{"a": "1"}, j2.Metadata)
		})
		t.Run("Boundaries", func(t *testing.T) {
			p := params(t, strings.Repeat("k", store.MaxKindLength))
			p.Payload = jsonString(store.MaxPayloadSize)
			insert(t, st, p)
			j := get(t, st, p.ID)
			require.Equal(t, p.Kind, j.Kind)
			require.Len(t, j.Payload, store.MaxPayloadSize)
		})
	})

	t.Run("Validation", func(t *testing.T) {
		cases := []struct {
			name string
			mod  func(*store.InsertParams)
		}{
			{"NilID", func(p *store.InsertParams) { p.ID = uuid.Nil }},
			{"EmptyKind", func(p *store.InsertParams) { p.Kind = "" }},
			{"KindTooLong", func(p *store.InsertParams) { p.Kind = strings.Repeat("k", store.MaxKindLength+1) }},
			{"PayloadTooLarge", func(p *store.InsertParams) { p.Payload = jsonString(store.MaxPayloadSize + 1) }},
			{"PriorityZero", withPriority(0)},
			{"PriorityTooLow", withPriority(store.PriorityLow + 1)},
			{"PriorityNegative", withPriority(-1)},
			{"NegativeDelay", withDelay(-time.Second)},
			{"MaxAttemptsZero", withMaxAttempts(0)},
			{"MaxAttemptsNegative", withMaxAttempts(-2)},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				first := params(t, "insert.valid", withUniqueKey("valid-first"))
				bad := params(t, "insert.bad", c.mod, withUniqueKey("bad"))
				last := params(t, "insert.valid", withUniqueKey("valid-last"))
				_, err := st.Insert(t.Context(), []store.InsertParams{first, bad, last})
				require.ErrorIs(t, err, store.ErrInvalidParams)
				requireNotFound(t, st, first.ID)
				requireNotFound(t, st, last.ID)
				// Nothing was claimed either: the keys are free and no job is due.
				res := claim(t, st, claimParams(10, longLease, "insert.valid", "insert.bad"))
				require.Empty(t, res.Jobs)
				insert(t, st, params(t, "insert.valid", withUniqueKey("valid-first")), params(t, "insert.valid", withUniqueKey("valid-last")))
			})
		}
	})

	// An ID that already exists (an explicit ID reused) fails the whole
	// call with ErrInvalidParams and changes nothing, whatever path the
	// store takes for the call's rows: one row, several, with unique keys
	// or without, the ID earlier in the same call.
	t.Run("ExistingID", func(t *testing.T) {
		cases := []struct {
			name  string
			keyed bool
			rows  func(existing uuid.UUID, fresh func() store.InsertParams) []store.InsertParams
		}{
			{"OneRow", false, func(id uuid.UUID, fresh func() store.InsertParams) []store.InsertParams {
				p := fresh()
				p.ID = id
				return []store.InsertParams{p}
			}},
			{"OneKeyedRow", true, func(id uuid.UUID, fresh func() store.InsertParams) []store.InsertParams {
				p := fresh()
				p.ID = id
				return []store.InsertParams{p}
			}},
			{"AmongOthers", false, func(id uuid.UUID, fresh func() store.InsertParams) []store.InsertParams {
				p := fresh()
				p.ID = id
				return []store.InsertParams{fresh(), p, fresh()}
			}},
			{"AmongKeyedOthers", true, func(id uuid.UUID, fresh func() store.InsertParams) []store.InsertParams {
				p := fresh()
				p.ID = id
				return []store.InsertParams{fresh(), p, fresh()}
			}},
			{"TwiceInOneCall", false, func(_ uuid.UUID, fresh func() store.InsertParams) []store.InsertParams {
				a, b := fresh(), fresh()
				b.ID = a.ID
				return []store.InsertParams{a, fresh(), b}
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := newStore(t)
				existing := insertOne(t, st, "insert.existing")
				before := get(t, st, existing)
				n := 0
				fresh := func() store.InsertParams {
					n++
					var mods []func(*store.InsertParams)
					if c.keyed {
						mods = append(mods, withUniqueKey(fmt.Sprintf("existing-%d", n)))
					}
					return params(t, "insert.other", mods...)
				}
				rows := c.rows(existing, fresh)
				_, err := st.Insert(t.Context(), rows)
				require.ErrorIs(t, err, store.ErrInvalidParams)
				requireUnchanged(t, st, before)
				for _, r := range rows {
					if r.ID != existing {
						requireNotFound(t, st, r.ID)
					}
				}
				res := claim(t, st, claimParams(10, longLease, "insert.other"))
				require.Empty(t, res.Jobs, "nothing of the call was inserted")
			})
		}
	})

	// The ID of a finished job is taken too, wherever the store keeps
	// finished jobs: a store with a history (store.Archiver) checks it as
	// well as its live table (pgstore once made a second job with the ID
	// of one in its history, issue 41). Through Insert, one row or among
	// others, keyed or not, and through InsertClaimed.
	t.Run("ExistingFinishedID", func(t *testing.T) {
		paths := []struct {
			name   string
			insert func(st store.Store, p store.InsertParams, other func() store.InsertParams) error
		}{
			{"OneRow", func(st store.Store, p store.InsertParams, _ func() store.InsertParams) error {
				_, err := st.Insert(t.Context(), []store.InsertParams{p})
				return err
			}},
			{"AmongOthers", func(st store.Store, p store.InsertParams, other func() store.InsertParams) error {
				_, err := st.Insert(t.Context(), []store.InsertParams{other(), p, other()})
				return err
			}},
			{"AmongKeyedOthers", func(st store.Store, p store.InsertParams, other func() store.InsertParams) error {
				a, b := other(), other()
				a.UniqueKey, b.UniqueKey = "finished-id-a", "finished-id-b"
				_, err := st.Insert(t.Context(), []store.InsertParams{a, p, b})
				return err
			}},
			{"InsertClaimed", func(st store.Store, p store.InsertParams, _ func() store.InsertParams) error {
				ic, ok := st.(store.InsertClaimer)
				if !ok {
					_, err := st.Insert(t.Context(), []store.InsertParams{p})
					return err
				}
				_, _, err := ic.InsertClaimed(t.Context(), &p, &store.InsertClaim{Owner: owner, LeaseDuration: longLease})
				return err
			}},
		}
		for _, outcome := range []store.Outcome{store.OutcomeSucceeded, store.OutcomeDead, store.OutcomeCancelled} {
			for _, path := range paths {
				t.Run(outcome.String()+"/"+path.name, func(t *testing.T) {
					st := newStore(t)
					id := insertOne(t, st, "insert.finished")
					before := finishOne(t, st, claimOnly(t, st, "insert.finished", id, longLease),
						store.FinishParams{Outcome: outcome, Error: "e"})
					if a, ok := st.(store.Archiver); ok {
						_, err := a.Archive(t.Context(), 100)
						require.NoError(t, err)
					}
					var others []uuid.UUID
					other := func() store.InsertParams {
						p := params(t, "insert.other")
						others = append(others, p.ID)
						return p
					}
					p := params(t, "insert.other")
					p.ID = id
					require.ErrorIs(t, path.insert(st, p, other), store.ErrInvalidParams)
					requireUnchanged(t, st, before)
					for _, o := range others {
						requireNotFound(t, st, o)
					}
					res := claim(t, st, claimParams(10, longLease, "insert.other"))
					require.Empty(t, res.Jobs, "nothing of the call was inserted")
				})
			}
		}
	})

	t.Run("UniqueKey", func(t *testing.T) {
		t.Run("DuplicateReturnsHolder", func(t *testing.T) {
			st := newStore(t)
			holder := insertOne(t, st, "unique", withUniqueKey("welcome:1"))
			before := get(t, st, holder)
			dup := params(t, "unique", withUniqueKey("welcome:1"), withPriority(store.PriorityHigh))
			other := params(t, "unique", withUniqueKey("welcome:2"))
			res, err := st.Insert(t.Context(), []store.InsertParams{dup, other})
			require.NoError(t, err)
			require.Equal(t, []store.InsertResult{{ID: holder, Duplicate: true}, {ID: other.ID}}, res)
			requireNotFound(t, st, dup.ID)
			requireUnchanged(t, st, before)
			get(t, st, other.ID)
		})

		t.Run("DuplicateInOneBatch", func(t *testing.T) {
			st := newStore(t)
			a := params(t, "unique", withUniqueKey("k"))
			b := params(t, "unique", withUniqueKey("other"))
			c := params(t, "unique", withUniqueKey("k"))
			d := params(t, "unique")
			e := params(t, "unique")
			res, err := st.Insert(t.Context(), []store.InsertParams{a, b, c, d, e})
			require.NoError(t, err)
			require.Equal(t, []store.InsertResult{
				{ID: a.ID}, {ID: b.ID}, {ID: a.ID, Duplicate: true}, {ID: d.ID}, {ID: e.ID},
			}, res, "empty keys never collide")
			requireNotFound(t, st, c.ID)
		})

		// In the default scope a key is held while its job is live; the
		// UniqueScope area covers the other scopes and the final states.
		heldIn := []store.State{store.StateScheduled, store.StateRunning, store.StateRetrying, store.StatePaused}
		for _, state := range heldIn {
			t.Run("HeldWhen"+stateName(state), func(t *testing.T) {
				st := newStore(t)
				holder := makeJob(t, st, state, "unique", withUniqueKey("k"))
				dup := params(t, "unique", withUniqueKey("k"))
				res, err := st.Insert(t.Context(), []store.InsertParams{dup})
				require.NoError(t, err)
				require.Equal(t, []store.InsertResult{{ID: holder.ID, Duplicate: true}}, res)
				requireNotFound(t, st, dup.ID)
				requireUnchanged(t, st, holder)
			})
		}

		// A finished job frees its key by default (UniqueScope.Finished
		// keeps it held).
		for _, state := range []store.State{store.StateSucceeded, store.StateDead} {
			t.Run("FreedWhen"+stateName(state), func(t *testing.T) {
				st := newStore(t)
				old := makeJob(t, st, state, "unique", withUniqueKey("k"))
				id := insertOne(t, st, "unique", withUniqueKey("k"))
				require.NotEqual(t, old.ID, id)
				requireUnchanged(t, st, old)
			})
		}

		t.Run("FreedWhenCancelled", func(t *testing.T) {
			st := newStore(t)
			old := makeJob(t, st, store.StateCancelled, "unique", withUniqueKey("k"))
			id := insertOne(t, st, "unique", withUniqueKey("k"))
			require.NotEqual(t, old.ID, id)
			require.Equal(t, "k", get(t, st, id).UniqueKey)
			requireUnchanged(t, st, old)
			// The new holder now blocks further inserts.
			res, err := st.Insert(t.Context(), []store.InsertParams{params(t, "unique", withUniqueKey("k"))})
			require.NoError(t, err)
			require.Equal(t, []store.InsertResult{{ID: id, Duplicate: true}}, res)
		})

		t.Run("RunNowOfCancelledTakesKeyBack", func(t *testing.T) {
			st := newStore(t)
			old := makeJob(t, st, store.StateCancelled, "unique", withUniqueKey("k"))
			control(t, st, old.ID, store.OpRunNow)
			dup := params(t, "unique", withUniqueKey("k"))
			res, err := st.Insert(t.Context(), []store.InsertParams{dup})
			require.NoError(t, err)
			require.Equal(t, []store.InsertResult{{ID: old.ID, Duplicate: true}}, res)
			requireNotFound(t, st, dup.ID)
		})

		t.Run("FreedWhenRunningJobFinishedCancelled", func(t *testing.T) {
			st := newStore(t)
			running := makeJob(t, st, store.StateRunning, "unique", withUniqueKey("k"))
			control(t, st, running.ID, store.OpCancel)
			got := finishOne(t, st, running, store.FinishParams{Outcome: store.OutcomeRetry, Error: "cancelled"})
			require.Equal(t, store.StateCancelled, got.State)
			id := insertOne(t, st, "unique", withUniqueKey("k"))
			require.NotEqual(t, running.ID, id)
		})

		t.Run("Concurrent", func(t *testing.T) {
			st := newStore(t)
			ctx := ctxTimeout(t)
			const n = 16
			ps := make([]store.InsertParams, n)
			for i := range ps {
				ps[i] = params(t, "unique", withUniqueKey("race"))
			}
			results := make([]store.InsertResult, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					res, err := st.Insert(ctx, ps[i:i+1])
					errs[i] = err
					if err == nil && len(res) == 1 {
						results[i] = res[0]
					}
				})
			}
			close(start)
			wg.Wait()

			var winners []uuid.UUID
			for i := range n {
				require.NoError(t, errs[i], "insert %d", i)
				if !results[i].Duplicate {
					winners = append(winners, results[i].ID)
				}
			}
			require.Len(t, winners, 1, "exactly one insert must win")
			for i := range n {
				require.Equal(t, winners[0], results[i].ID, "insert %d reported another holder", i)
			}
			for i := range n {
				if ps[i].ID != winners[0] {
					requireNotFound(t, st, ps[i].ID)
				}
			}
			require.Equal(t, "race", get(t, st, winners[0]).UniqueKey)
		})
	})
}

// requireBetween requires that tm lies within [from, to], with the
// tolerance of a database clock at either end.
func requireBetween(t *testing.T, from, to, tm time.Time, what string) {
	t.Helper()
	require.False(t, tm.IsZero(), "%s is zero", what)
	require.False(t, tm.Before(from.Add(-storedTolerance)), "%s %s is before %s", what, tm, from)
	require.False(t, tm.After(to.Add(storedTolerance)), "%s %s is after %s", what, tm, to)
}

// jsonString returns a JSON string literal of exactly n bytes (n >= 2).
func jsonString(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	b[0], b[n-1] = '"', '"'
	return b
}

// stateName returns s capitalised, for subtest names.
func stateName(s store.State) string {
	return strings.ToUpper(string(s[:1])) + string(s[1:])
}
