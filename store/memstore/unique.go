package memstore

import (
	"time"

	"github.com/axsched/ax/store"
)

// uniqueKey is a unique key in its scope (store.UniqueScope): the key
// holds among the jobs whose uniqueKey is equal. kind is empty for a
// Global key (no job has an empty kind); period and window are zero
// without a Period, else the period in seconds and the index of the
// insert's window of it, counted from the Unix epoch.
type uniqueKey struct {
	kind   string
	period int64
	window int64
	key    string
}

// scopedKey returns p's unique key in its scope, for an insert at now.
// The second result says whether the key stays held once its job has
// succeeded or died: with Finished, and within its window with a Period
// (a later window has another uniqueKey, so "held until pruned" is the
// same as "held for the rest of its window").
func scopedKey(p *store.InsertParams, now time.Time) (uniqueKey, bool) {
	k := uniqueKey{kind: p.Kind, key: p.UniqueKey}
	if p.Unique.Global {
		k.kind = ""
	}
	if p.Unique.Period > 0 {
		k.period = int64(p.Unique.Period / time.Second)
		k.window = now.Unix() / k.period // now is after 1970: no negative division to round
	}
	return k, p.Unique.Finished || p.Unique.Period > 0
}

// holdsKey reports whether j, in its current state, holds its unique key:
// a live job does, a succeeded or dead one when its scope keeps the key,
// a cancelled one never.
func holdsKey(j *job) bool {
	st := j.rec.State
	return j.hasKey && st != store.StateCancelled && (live(st) || j.keepKey)
}

// holder returns the job that holds k, or nil.
func (s *Store) holder(k uniqueKey) *job { return s.unique[k] }

// takeKey records j as its key's holder when its state holds it (index
// calls it). Whatever may take a key from nothing (an insert, a run-now
// of a final job) checks holder first, so that j never displaces another
// holder.
func (s *Store) takeKey(j *job) {
	if holdsKey(j) {
		s.unique[j.ukey] = j
	}
}

// dropKey forgets j as its key's holder (unindex calls it; the index
// that follows takes the key again if j's new state holds it).
func (s *Store) dropKey(j *job) {
	if j.hasKey && s.unique[j.ukey] == j {
		delete(s.unique, j.ukey)
	}
}
