package storetest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testKindPauser checks the optional KindPauser: pause and resume
// (idempotent, UpdatedAt moving only on a change), the listing of paused
// kinds only (a resume leaves no state behind), the
// empty-kind notification of a resume, that the store keeps jobs of a
// paused kind as they are, and refused kinds.
func testKindPauser(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.KindPauser](t, newStore)
	t.Run("PauseResume", func(t *testing.T) {
		st := newStore(t)
		kp := as[store.KindPauser](t, st)
		states, err := kp.KindStates(t.Context())
		require.NoError(t, err)
		require.Empty(t, states)

		// updated says where UpdatedAt is after the step: set to the
		// call's store time, kept, or zero (a kind with no stored state).
		const (
			set = iota
			kept
			zero
		)
		steps := []struct {
			name    string
			kind    string
			paused  bool
			updated int
		}{
			{"Pause", "kp.b", true, set},
			{"PauseAgain", "kp.b", true, kept},
			{"PauseAnother", "kp.a", true, set},
			{"Resume", "kp.b", false, set},
			{"ResumeAgain", "kp.b", false, zero}, // a resume keeps no state
			{"ResumeNeverPaused", "kp.c", false, zero},
		}
		last := make(map[string]store.KindState)
		for _, s := range steps {
			t.Run(s.name, func(t *testing.T) {
				if prev, ok := last[s.kind]; ok && s.updated == set {
					waitUntilStoreTime(t, st, prev.UpdatedAt)
				}
				before := storeNow(t, st)
				ks, err := kp.SetKindPaused(t.Context(), s.kind, s.paused)
				after := storeNow(t, st)
				require.NoError(t, err)
				require.Equal(t, s.kind, ks.Kind)
				require.Equal(t, s.paused, ks.Paused)
				switch s.updated {
				case set:
					requireBetween(t, before, after, ks.UpdatedAt, "UpdatedAt of a change")
				case kept:
					requireTimeNear(t, last[s.kind].UpdatedAt, ks.UpdatedAt, 0, "UpdatedAt moved without a change")
				case zero:
					require.True(t, ks.UpdatedAt.IsZero(), "a kind never paused has no UpdatedAt")
					return // and no stored state
				}
				last[s.kind] = *ks
			})
		}
		states, err = kp.KindStates(t.Context())
		require.NoError(t, err)
		require.Len(t, states, 1, "a resumed kind, or one never paused, left a state (kind rows must not pile up)")
		for i, k := range []string{"kp.a"} {
			require.Equal(t, k, states[i].Kind, "ordered by kind")
			require.Equal(t, last[k].Paused, states[i].Paused, k)
			requireTimeNear(t, last[k].UpdatedAt, states[i].UpdatedAt, storedTolerance, k)
		}
	})

	t.Run("JobsUntouched", func(t *testing.T) {
		// The store records the pause; hosts leave the kind out of their
		// claims. Jobs keep their state and a claim naming the kind still
		// takes them (a host that has not yet read the pause).
		st := newStore(t)
		kp := as[store.KindPauser](t, st)
		j := makeJob(t, st, store.StateScheduled, "kp.jobs")
		due := insertOne(t, st, "kp.jobs")
		_, err := kp.SetKindPaused(t.Context(), "kp.jobs", true)
		require.NoError(t, err)
		requireUnchanged(t, st, j)
		require.Equal(t, store.StateScheduled, get(t, st, due).State)
		claimOnly(t, st, "kp.jobs", due, longLease)
	})

	t.Run("ResumeNotifies", func(t *testing.T) {
		st := newStore(t)
		kp := as[store.KindPauser](t, st)
		n := as[store.Notifier](t, st)
		_, err := kp.SetKindPaused(t.Context(), "kp.notify", true)
		require.NoError(t, err)
		rec := newRecorder()
		t.Cleanup(n.Subscribe(rec.record))
		_, err = kp.SetKindPaused(t.Context(), "kp.notify", false)
		require.NoError(t, err)
		rec.waitFor(t, "with an empty kind (re-check)", func(n store.Notification) bool { return n.Kind == "" })
	})

	t.Run("PauseNotifies", func(t *testing.T) {
		// Hosts re-read the paused kinds when they hear it, so that a
		// pause stops them at once rather than at their next heartbeat.
		st := newStore(t)
		kp := as[store.KindPauser](t, st)
		n := as[store.Notifier](t, st)
		rec := newRecorder()
		t.Cleanup(n.Subscribe(rec.record))
		_, err := kp.SetKindPaused(t.Context(), "kp.notify", true)
		require.NoError(t, err)
		rec.waitFor(t, "with an empty kind (re-check)", func(n store.Notification) bool { return n.Kind == "" })
	})

	t.Run("Invalid", func(t *testing.T) {
		st := newStore(t)
		kp := as[store.KindPauser](t, st)
		for _, kind := range []string{"", invalidUTF8, "a\x00b", strings.Repeat("k", store.MaxKindLength+1)} {
			for _, paused := range []bool{true, false} {
				_, err := kp.SetKindPaused(t.Context(), kind, paused)
				require.ErrorIs(t, err, store.ErrInvalidParams, "kind %q", kind)
			}
		}
		states, err := kp.KindStates(t.Context())
		require.NoError(t, err)
		require.Empty(t, states, "a refused call stored a state")
	})
}
