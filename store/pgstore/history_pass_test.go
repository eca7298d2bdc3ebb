package pgstore

import (
	"testing"
	"time"

	"github.com/axsched/ax/store"
)

// TestArchivePasses checks where each archive pass starts: the whole index
// first, then shortly before the last drained pass, and every minute a
// sweep further back; a pass stopped by its limit moves nothing.
func TestArchivePasses(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	steps := []struct {
		name      string
		before    func(h *historyState)
		wantFrom  time.Time
		wantPass  archivePass
		db        time.Time
		drained   bool
		afterFrom time.Time // h.from after the pass
	}{
		{name: "first pass walks everything", wantFrom: store.MinTime, wantPass: passFull,
			db: t0, drained: false, afterFrom: time.Time{}},
		{name: "a full walk stopped by its limit walks everything again", wantFrom: store.MinTime, wantPass: passFull,
			db: t0.Add(time.Second), drained: true, afterFrom: t0.Add(time.Second - archiveRecheck)},
		{name: "then recent passes", wantFrom: t0.Add(time.Second - archiveRecheck), wantPass: passRecent,
			db: t0.Add(2 * time.Second), drained: true, afterFrom: t0.Add(2*time.Second - archiveRecheck)},
		{name: "a recent pass stopped by its limit leaves the start", wantFrom: t0.Add(2*time.Second - archiveRecheck), wantPass: passRecent,
			db: t0.Add(3 * time.Second), drained: false, afterFrom: t0.Add(2*time.Second - archiveRecheck)},
		{name: "a minute on, a sweep from before the last one",
			before:   func(h *historyState) { h.lastSweep = time.Now().Add(-archiveSweepEvery) },
			wantFrom: t0.Add(time.Second - archiveSweepSpan), wantPass: passSweep,
			db: t0.Add(time.Minute), drained: true, afterFrom: t0.Add(time.Minute - archiveRecheck)},
		{name: "after the sweep, recent passes again", wantFrom: t0.Add(time.Minute - archiveRecheck), wantPass: passRecent,
			db: t0.Add(time.Minute + time.Second), drained: true, afterFrom: t0.Add(time.Minute + time.Second - archiveRecheck)},
		{name: "the next sweep starts before the last one",
			before:   func(h *historyState) { h.lastSweep = time.Now().Add(-archiveSweepEvery) },
			wantFrom: t0.Add(time.Minute - archiveSweepSpan), wantPass: passSweep,
			db: t0.Add(2 * time.Minute), drained: true, afterFrom: t0.Add(2*time.Minute - archiveRecheck)},
	}
	s := &Store{}
	for _, st := range steps {
		if st.before != nil {
			st.before(&s.history)
		}
		from, pass := s.archiveFrom()
		if !from.Equal(st.wantFrom) || pass != st.wantPass {
			t.Fatalf("%s: pass from %v (%d), want from %v (%d)", st.name, from, pass, st.wantFrom, st.wantPass)
		}
		s.archived(st.db, pass, st.drained, nil)
		if !s.history.from.Equal(st.afterFrom) {
			t.Fatalf("%s: next start %v, want %v", st.name, s.history.from, st.afterFrom)
		}
	}
}
