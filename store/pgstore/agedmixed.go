package pgstore

import (
	"sync"
	"time"
)

// While priority aging mixes a kind's priority ranges (a backlog of a lower
// priority has waited for AgeAfter behind due jobs of a higher one), the
// claim of one kind takes nothing and says so (claimAgedMixed), and the
// Store makes the open claim in its place: two statements, two round trips,
// for every claim of the kind. Such a backlog lasts, as a rule, for many
// claims: it forms while the hosts cannot keep up. So after a claim of one
// kind found its ranges mixed, the Store makes the open claim at once for
// that kind's claims for agedMixedHold, and then tries the claim of one
// kind again. A kind whose ranges stopped mixing meanwhile pays the open
// claim's cost for at most that long; while they stay mixed, one claim a
// hold pays the extra round trip. Both claims take the jobs in claim
// order, so which one runs changes what a claim costs, never what it
// takes.

// agedMixedHold is how long a Store makes the open claim directly for a
// kind whose claim of one kind found its ranges mixed.
const agedMixedHold = time.Second

// agedMixedKinds records the kinds whose claim of one kind found aging
// mixing their ranges, each until the Store tries that claim again. The
// zero value is ready; it is safe for concurrent use.
type agedMixedKinds struct {
	mu    sync.Mutex
	until map[string]time.Time
	hold  time.Duration // agedMixedHold when 0 (tests set it)
}

// tryOneKind reports whether a claim of kinds, at now, may be the claim of
// one kind: it asks for one kind, and no claim of that kind found its
// ranges mixed within the hold before now.
func (m *agedMixedKinds) tryOneKind(kinds []string, now time.Time) bool {
	if len(kinds) != 1 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.until[kinds[0]]
	if !ok {
		return true
	}
	if now.Before(until) {
		return false
	}
	delete(m.until, kinds[0])
	return true
}

// saw records that a claim of one kind of kind found its ranges mixed at
// now.
func (m *agedMixedKinds) saw(kind string, now time.Time) {
	hold := m.hold
	if hold <= 0 {
		hold = agedMixedHold
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.until == nil {
		m.until = map[string]time.Time{}
	}
	m.until[kind] = now.Add(hold)
}
