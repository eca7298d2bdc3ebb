package pgstore

import (
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/axsched/ax/store"
)

// auditEvery is how often the cursors are audited: a scan of every range
// a claim asked for, from its start up to the cursor, for a job made
// claimable below a cursor by something that did not notify (an
// operator's hand-written UPDATE). Every path of this package notifies;
// this is a safety net. The audit runs beside the claims, never in one
// (Store.auditCursors): under a held snapshot it steps over every entry
// claimed since the horizon was pinned, which once made every tenth
// second's claim, and the jobs waiting behind it, hundreds of
// milliseconds late.
const auditEvery = 10 * time.Second

// cursorKey is one range of jobs_claim_idx: a kind and a priority.
type cursorKey struct {
	kind     string
	priority int
}

// claimCursors lets the plain claim start each range scan of
// jobs_claim_idx where the previous claim left it instead of at the
// range's start. A claimed job leaves its old index entry behind until
// vacuum removes it, and while a long transaction or a replica's query
// holds the xmin horizon back vacuum removes none: every scan from the
// range's start steps over all the entries claimed since, visiting each
// one's heap tuple, so claims slow down with every second the snapshot
// is held (axbench heldxmin). A cursor skips them.
//
// A job can become claimable below a cursor: inserted with an explicit
// past run_at, or by a transaction that started (and read now()) before
// a claim but committed after it, or made retrying, resumed or run now.
// Every such write notifies, in the same transaction, with the kind and
// the earliest run_at it made claimable, and the Store's listener lowers
// the kind's cursors to it before subscribers hear of it (so the claim a
// notification triggers already scans from there). Cursors are therefore
// used only while the listener is listening: before the first Subscribe,
// between a lost connection and the next LISTEN (whose notifications are
// gone) they are off and every claim scans whole ranges; when it listens
// again, and on a kind's resume, they start afresh. A notification that
// arrives while a claim is running lowers what that claim would set.
//
// Notifications arrive asynchronously, so writes through this Store that
// can leave a job claimable below a cursor also lower it themselves
// before they return (an insert with an explicit run_at, a resumed or
// run-now job, a kind's resume): a claim that follows them in the same
// process sees the job at once. An insert holds its kinds' cursors down
// from before its statement until it has committed (hold), so that a
// claim overlapping it cannot set them past its rows again. An insert in
// the caller's transaction (InsertTx) holds them until it returns; what
// it commits later is found through its notification. Writes that set run_at from their own
// now() (inserts, retries, snoozes, releases, rescues) land at or above
// every cursor set by a claim that started before them; one that
// overlapped a claim is found once its notification arrives.
type claimCursors struct {
	mu       sync.Mutex
	on       bool
	at       map[cursorKey]time.Time
	inflight map[*cursorClaim]struct{}
	holds    map[*cursorHold]struct{}
	auditAt  time.Time // when the last audit was started
	every    time.Duration
}

// cursorClaim is one claim in flight: what notifications lowered while
// it ran, and whether the cursors were reset meanwhile.
type cursorClaim struct {
	lowered map[string]time.Time
	reset   bool
}

// cursorHold is an insert in flight of jobs with an explicit run_at: the
// earliest run_at per kind, which no claim's end may set a cursor above
// until the insert has committed (see hold).
type cursorHold struct {
	below map[string]time.Time
}

func newClaimCursors() *claimCursors {
	return &claimCursors{at: map[cursorKey]time.Time{}, inflight: map[*cursorClaim]struct{}{},
		holds: map[*cursorHold]struct{}{}, every: auditEvery}
}

// hold lowers the cursors of each kind of params that has an explicit
// run_at to the earliest such run_at, and keeps every claim that ends
// before release is called from setting them above it. An insert holds
// from before its statement until its transaction has committed: a claim
// that began in between did not see the rows (not yet committed) and
// would otherwise set the cursor past them, where a claim right after the
// insert returned would not find them until their notification arrived.
// Without an explicit run_at there is nothing to hold (the rows land at
// or above every cursor; see claimCursors), and release is a no-op.
func (c *claimCursors) hold(params []store.InsertParams) (release func()) {
	var h *cursorHold
	for i := range params {
		p := &params[i]
		if p.RunAt.IsZero() {
			continue
		}
		if h == nil {
			h = &cursorHold{below: map[string]time.Time{}}
		}
		at := p.RunAt.Add(-time.Microsecond)
		if t, ok := h.below[p.Kind]; !ok || at.Before(t) {
			h.below[p.Kind] = at
		}
	}
	if h == nil {
		return func() {}
	}
	for kind, at := range h.below {
		c.lower(kind, at.Add(time.Microsecond))
	}
	c.mu.Lock()
	c.holds[h] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.holds, h)
		c.mu.Unlock()
	}
}

// begin returns the lower bound of each range of kinds (3 per kind, in
// priority order 1, 2, 3; invalid: the range's start) and a handle for
// end, or (nil, nil, false) when cursors are off. audit reports that the
// ranges below those bounds are due for an audit (auditEvery).
func (c *claimCursors) begin(kinds []string, now time.Time) (from []pgtype.Timestamptz, cl *cursorClaim, audit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return nil, nil, false
	}
	cl = &cursorClaim{}
	c.inflight[cl] = struct{}{}
	if now.Sub(c.auditAt) >= c.every || now.Before(c.auditAt) {
		c.auditAt = now
		audit = true
	}
	from = make([]pgtype.Timestamptz, 3*len(kinds))
	for i, k := range kinds {
		for p := 1; p <= 3; p++ {
			if t, ok := c.at[cursorKey{k, p}]; ok {
				from[3*i+p-1] = pgtype.Timestamptz{Time: t, Valid: true}
			}
		}
	}
	return from, cl, audit
}

// peek returns the lower bound of each range of kind (3, in priority
// order; invalid: the range's start), or nil when cursors are off: where
// a scan for due jobs of kind may start without opening a claim.
func (c *claimCursors) peek(kind string) []pgtype.Timestamptz {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return nil
	}
	from := make([]pgtype.Timestamptz, 3)
	for p := 1; p <= 3; p++ {
		if t, ok := c.at[cursorKey{kind, p}]; ok {
			from[p-1] = pgtype.Timestamptz{Time: t, Valid: true}
		}
	}
	return from
}

// end records where the next scan of each range may start: the earliest
// due candidate the claim left (held by another claimer or over a limit),
// or, when it left none, the claim's now (every row at or before it that
// the claim's snapshot did not see notifies when it commits), lowered by
// what was notified while it ran. ok false (the claim failed) records
// nothing.
func (c *claimCursors) end(cl *cursorClaim, kinds []string, held []pgtype.Timestamptz, claimNow time.Time, ok bool) {
	if cl == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, cl)
	if !ok || !c.on || cl.reset || len(held) != 3*len(kinds) {
		return
	}
	for i, k := range kinds {
		for p := 1; p <= 3; p++ {
			next := claimNow
			if h := held[3*i+p-1]; h.Valid && h.Time.Before(next) {
				next = h.Time
			}
			if low, ok := cl.lowered[k]; ok && low.Before(next) {
				next = low
			}
			for h := range c.holds {
				if low, ok := h.below[k]; ok && low.Before(next) {
					next = low
				}
			}
			c.at[cursorKey{k, p}] = next
		}
	}
}

// lower moves the cursors of kind back to runAt, for a job made claimable
// there. One microsecond of margin covers run_at values written with more
// precision than PostgreSQL keeps.
func (c *claimCursors) lower(kind string, runAt time.Time) {
	runAt = runAt.Add(-time.Microsecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := 1; p <= 3; p++ {
		key := cursorKey{kind, p}
		if t, ok := c.at[key]; ok && runAt.Before(t) {
			c.at[key] = runAt
		}
	}
	for cl := range c.inflight {
		if t, ok := cl.lowered[kind]; !ok || runAt.Before(t) {
			if cl.lowered == nil {
				cl.lowered = map[string]time.Time{}
			}
			cl.lowered[kind] = runAt
		}
	}
}

// reset forgets every cursor, and what claims in flight would set.
func (c *claimCursors) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked()
}

func (c *claimCursors) resetLocked() {
	clear(c.at)
	for cl := range c.inflight {
		cl.reset = true
	}
}

// listening turns cursors on (the listener holds a LISTEN) or off; either
// way they start afresh.
func (c *claimCursors) listening(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = on
	c.resetLocked()
}
