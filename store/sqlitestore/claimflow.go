package sqlitestore

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/axsched/ax/store"
)

// Flow claims: a claim of kinds that flow settings hold back or that have
// sequences, or with priority aging, takes jobs as memstore does, inside
// the claim's write transaction. For each pass (the aged jobs across
// priorities, then each priority) it merges, in (run_at, id) order, the
// requested kinds' claimable rows read page by page from jobs_claim, and
// takes each row its kind, partition and sequence allow, until the
// limits are reached. Rows held back are stepped over, so that a held
// partition or sequence never keeps the claim from the others: a claim
// reads at most the kinds' due rows, and stops reading a kind once the
// kind itself may start no more.

// flowPage is how many rows a stream reads at a time.
const flowPage = 64

// flowCand is a claimable row a flow claim considers.
type flowCand struct {
	seq    int64
	id     []byte
	runAt  int64
	part   string
	seqKey sql.NullString
}

// flowWant is a kind a flow claim asks for and what it may still take.
type flowWant struct {
	kind     string
	left     int // the caller's limit for the kind, less what was taken
	f        *flowRow
	running  int64 // the kind's running jobs, those taken included
	rateLeft int   // starts the kind's rate bucket allows
	taken    int

	partRunning map[string]int64     // running per partition, as read (lazily)
	partTAT     map[string]time.Time // partition buckets, as read (lazily)
	partTaken   map[string]int       // jobs taken per partition
	seqs        map[string]int64     // a sequence's head row that may start; -1: none may
}

// flowClaiming is one flow claim in progress.
type flowClaiming struct {
	w       *wtx
	res     *store.ClaimResult
	left    int
	taken   map[int64]bool
	claimed []int64 // seqs, in claim order
}

// wantsFlowClaim reports whether a claim of kinds with params needs the
// flow claim: a kind whose flow settings hold claims back, a kind with
// live jobs in sequences, or priority aging with a job aged already
// (without one, aging changes nothing: the plain claim is exact, and a
// Scheduler's claims, which all ask for aging, stay as cheap as before).
func (w *wtx) wantsFlowClaim(params *store.ClaimParams, kinds []string) (bool, error) {
	for _, k := range kinds {
		f, err := w.flowOf(k)
		if err != nil {
			return false, err
		}
		if f != nil && f.cfg.HoldsClaims() {
			return true, nil
		}
		var n int
		if err := w.queryRow(qKindHasSeq, k).Scan(&n); err != nil {
			return false, err
		}
		if n > 0 {
			return true, nil
		}
	}
	if params.AgeAfter <= 0 {
		return false, nil
	}
	cutoff := toUS(w.now.Add(-params.AgeAfter))
	for _, k := range kinds {
		for _, prio := range store.Priorities {
			rows, err := w.query(qFlowCands, k, prio, cutoff, int64(math.MinInt64), []byte{}, 1)
			if err != nil {
				return false, err
			}
			aged := rows.Next()
			rows.Close()
			if err := rows.Err(); err != nil {
				return false, err
			}
			if aged {
				return true, nil
			}
		}
	}
	return false, nil
}

// claimFlow claims for params the kinds and limits of wants; see Claim.
func (w *wtx) claimFlow(params *store.ClaimParams, kinds []string, limits []int) (*store.ClaimResult, error) {
	now := w.now
	c := &flowClaiming{w: w, res: &store.ClaimResult{Now: now, Clock: now}, left: params.Limit, taken: make(map[int64]bool)}
	wants := make([]*flowWant, len(kinds))
	for i, k := range kinds {
		f, err := w.flowOf(k)
		if err != nil {
			return nil, err
		}
		fw := &flowWant{kind: k, left: limits[i], f: f}
		if fw.running, err = w.kindRunning(k); err != nil {
			return nil, err
		}
		if f != nil && !f.cfg.Rate.IsZero() {
			fw.rateLeft = f.cfg.Rate.Available(f.tat, now)
		}
		wants[i] = fw
	}
	if params.AgeAfter > 0 {
		if err := c.pass(wants, store.Priorities, toUS(now.Add(-params.AgeAfter))); err != nil {
			return nil, err
		}
	}
	for _, prio := range store.Priorities {
		if err := c.pass(wants, []int{prio}, toUS(now)); err != nil {
			return nil, err
		}
	}
	if err := c.settle(wants); err != nil {
		return nil, err
	}
	if err := c.update(params); err != nil {
		return nil, err
	}
	next, err := c.nextRunAt(wants)
	if err != nil {
		return nil, err
	}
	c.res.NextRunAt = next
	return c.res, nil
}

// flowStream reads one kind's claimable rows of one priority due by a
// bound, in (run_at, id) order, a page at a time.
type flowStream struct {
	fw    *flowWant
	prio  int
	bound int64
	rows  []flowCand
	pos   int
	done  bool
}

// head returns the stream's next row not taken, or nil at its end.
func (st *flowStream) head(c *flowClaiming) (*flowCand, error) {
	for {
		for st.pos < len(st.rows) {
			r := &st.rows[st.pos]
			if !c.taken[r.seq] {
				return r, nil
			}
			st.pos++
		}
		if st.done {
			return nil, nil
		}
		afterRun, afterID := int64(math.MinInt64), []byte{}
		if n := len(st.rows); n > 0 {
			afterRun, afterID = st.rows[n-1].runAt, st.rows[n-1].id
		}
		// The first page is what the kind may still take and one more (a
		// claim of a few jobs reads a few rows); later ones are full.
		page := flowPage
		if len(st.rows) == 0 && st.fw.left >= 0 {
			page = min(flowPage, min(st.fw.left, c.left)+1)
		}
		rows, err := c.w.query(qFlowCands, st.fw.kind, st.prio, st.bound, afterRun, afterID, page)
		if err != nil {
			return nil, err
		}
		st.rows, st.pos = st.rows[:0], 0
		for rows.Next() {
			var r flowCand
			if err := rows.Scan(&r.seq, &r.id, &r.runAt, &r.part, &r.seqKey); err != nil {
				rows.Close()
				return nil, err
			}
			st.rows = append(st.rows, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(st.rows) < page {
			st.done = true
		}
		if len(st.rows) == 0 {
			return nil, nil
		}
	}
}

// pass takes, in (run_at, id) order across the kinds and priorities
// prios, the rows due by bound that the flow settings allow.
func (c *flowClaiming) pass(wants []*flowWant, prios []int, bound int64) error {
	var streams []*flowStream
	for _, fw := range wants {
		for _, p := range prios {
			streams = append(streams, &flowStream{fw: fw, prio: p, bound: bound})
		}
	}
	for c.left > 0 {
		var (
			best   *flowCand
			bestSt *flowStream
		)
		for _, st := range streams {
			if !st.fw.kindAllows(c.w.now, c.left) {
				continue
			}
			r, err := st.head(c)
			if err != nil {
				return err
			}
			if r == nil {
				continue
			}
			if best == nil || r.runAt < best.runAt || (r.runAt == best.runAt && bytes.Compare(r.id, best.id) < 0) {
				best, bestSt = r, st
			}
		}
		if best == nil {
			return nil
		}
		bestSt.pos++
		ok, err := c.rowAllows(bestSt.fw, best)
		if err != nil {
			return err
		}
		if ok {
			c.take(bestSt.fw, best)
		}
	}
	return nil
}

// kindAllows reports whether the kind may start a job now, as far as the
// limits and the kind-wide flow settings go.
func (fw *flowWant) kindAllows(now time.Time, left int) bool {
	if fw.left == 0 || left == 0 {
		return false
	}
	f := fw.f
	if f == nil {
		return true
	}
	if hold, at := fw.breakerHold(now); hold || !at.IsZero() {
		return false
	}
	if f.cfg.Concurrency > 0 && fw.running >= int64(f.cfg.Concurrency) {
		return false
	}
	return f.cfg.Rate.IsZero() || fw.rateLeft > 0
}

// breakerHold reports whether the kind's breaker holds its jobs until a
// running job ends (hold), or until a time (at, not zero).
func (fw *flowWant) breakerHold(now time.Time) (hold bool, at time.Time) {
	b := &fw.f.breaker
	switch {
	case fw.f.cfg.Breaker.IsZero() || b.Closed():
		return false, time.Time{}
	case b.State == store.BreakerOpen && now.Before(b.ProbeAt):
		return false, b.ProbeAt
	}
	// Open past its cool-down, or half-open: one probe at a time.
	return fw.running > 0, time.Time{}
}

// partRun returns how many jobs of partition key run, those taken
// included.
func (c *flowClaiming) partRun(fw *flowWant, key string) (int64, error) {
	n, ok := fw.partRunning[key]
	if !ok {
		if err := c.w.queryRow(qPartRunning, fw.kind, key).Scan(&n); err != nil {
			return 0, err
		}
		if fw.partRunning == nil {
			fw.partRunning = make(map[string]int64)
		}
		fw.partRunning[key] = n
	}
	return n + int64(fw.partTaken[key]), nil
}

// partBucket returns the rate bucket of partition key.
func (c *flowClaiming) partBucket(fw *flowWant, key string) (time.Time, error) {
	tat, ok := fw.partTAT[key]
	if ok {
		return tat, nil
	}
	var us int64
	err := c.w.queryRow(qPartTATGet, fw.kind, key).Scan(&us)
	switch {
	case isNoRows(err):
	case err != nil:
		return time.Time{}, err
	default:
		tat = fromUS(us)
	}
	if fw.partTAT == nil {
		fw.partTAT = make(map[string]time.Time)
	}
	fw.partTAT[key] = tat
	return tat, nil
}

// partHeld reports whether partition key holds its jobs until a running
// one ends (hold), or until a time (at, not zero).
func (c *flowClaiming) partHeld(fw *flowWant, key string) (hold bool, at time.Time, err error) {
	f := fw.f
	if f == nil {
		return false, at, nil
	}
	if f.cfg.PartitionConcurrency > 0 {
		n, err := c.partRun(fw, key)
		if err != nil {
			return false, at, err
		}
		if n >= int64(f.cfg.PartitionConcurrency) {
			return true, at, nil
		}
	}
	if r := f.cfg.PartitionRate; !r.IsZero() {
		tat, err := c.partBucket(fw, key)
		if err != nil {
			return false, at, err
		}
		if r.Available(tat, c.w.now) <= fw.partTaken[key] {
			at = r.NextAt(r.Take(tat, c.w.now, fw.partTaken[key]))
		}
	}
	if !f.cfg.PartitionBreaker.IsZero() {
		b, err := c.w.partBreaker(fw.kind, key)
		if err != nil || b == nil {
			return false, at, err
		}
		n, err := c.partRun(fw, key)
		if err != nil {
			return false, at, err
		}
		ok, _, bat := b.PartitionBreakerHold(c.w.now, n)
		if !ok && bat.IsZero() {
			return true, at, nil // a probe runs: its end notifies
		}
		at = latest(at, bat)
	}
	return false, at, nil
}

// seqAllows reports whether row r, of a sequence, may start: it is the
// first live job of its sequence and none of them runs (nor was taken by
// this claim).
func (c *flowClaiming) seqAllows(fw *flowWant, r *flowCand) (bool, error) {
	key := r.seqKey.String
	head, ok := fw.seqs[key]
	if !ok {
		var running int64
		if err := c.w.queryRow(qSeqRunning, fw.kind, key).Scan(&running); err != nil {
			return false, err
		}
		head = -1
		if running == 0 {
			if err := c.w.queryRow(qSeqHead, fw.kind, key).Scan(&head); err != nil && !isNoRows(err) {
				return false, err
			}
		}
		if fw.seqs == nil {
			fw.seqs = make(map[string]int64)
		}
		fw.seqs[key] = head
	}
	return head == r.seq, nil
}

// rowAllows reports whether row r of fw's kind may start now.
func (c *flowClaiming) rowAllows(fw *flowWant, r *flowCand) (bool, error) {
	hold, at, err := c.partHeld(fw, r.part)
	if err != nil || hold || !at.IsZero() {
		return false, err
	}
	if r.seqKey.Valid {
		return c.seqAllows(fw, r)
	}
	return true, nil
}

// take claims row r of fw's kind.
func (c *flowClaiming) take(fw *flowWant, r *flowCand) {
	fw.left--
	c.left--
	fw.taken++
	fw.running++
	c.taken[r.seq] = true
	c.claimed = append(c.claimed, r.seq)
	if fw.partTaken == nil {
		fw.partTaken = make(map[string]int)
	}
	fw.partTaken[r.part]++
	if r.seqKey.Valid {
		fw.seqs[r.seqKey.String] = -1 // it runs now
	}
	f := fw.f
	if f == nil {
		return
	}
	if !f.cfg.Rate.IsZero() {
		fw.rateLeft--
	}
	if !f.cfg.Breaker.IsZero() {
		if t := f.breaker.Probe(fw.kind, c.w.now); t != nil {
			c.res.Breakers = append(c.res.Breakers, *t)
			f.dirty = true
		}
	}
	if t := c.w.probePartBreaker(fw.kind, r.part); t != nil {
		c.res.Breakers = append(c.res.Breakers, *t)
	}
}

// settle writes the rate buckets and breakers the claim drew on.
func (c *flowClaiming) settle(wants []*flowWant) error {
	now := c.w.now
	for _, fw := range wants {
		f := fw.f
		if f == nil || fw.taken == 0 {
			continue
		}
		if !f.cfg.Rate.IsZero() {
			f.tat = f.cfg.Rate.Take(f.tat, now, fw.taken)
			f.dirty = true
		}
		if r := f.cfg.PartitionRate; !r.IsZero() {
			for key, n := range fw.partTaken {
				tat, err := c.partBucket(fw, key)
				if err != nil {
					return err
				}
				tat = r.Take(tat, now, n)
				if _, err := c.w.exec(qPartTATPut, fw.kind, key, toUS(tat)); err != nil {
					return err
				}
				fw.partTAT[key] = tat
			}
		}
		// From here on, partTaken counts in the buckets and the
		// partitions' running jobs as read again.
		for key, n := range fw.partTaken {
			if _, ok := fw.partRunning[key]; ok {
				fw.partRunning[key] += int64(n)
			}
		}
		fw.partTaken = nil
	}
	return c.w.saveFlows()
}

// update makes the claimed rows running, in one statement, and adds them
// to the result in claim order.
func (c *flowClaiming) update(params *store.ClaimParams) error {
	if len(c.claimed) == 0 {
		return nil
	}
	w := c.w
	list, err := json.Marshal(c.claimed)
	if err != nil {
		return err
	}
	js, err := loadAll(w.query(qClaimUpdate, params.Owner, toUS(w.now.Add(params.LeaseDuration)), toUS(w.now), string(list)))
	if err != nil {
		return err
	}
	order := make(map[int64]int, len(c.claimed))
	for i, seq := range c.claimed {
		order[seq] = i
	}
	slices.SortFunc(js, func(a, b *jobRow) int { return order[a.seq] - order[b.seq] })
	for _, j := range js {
		rec, err := j.record()
		if err != nil {
			return err
		}
		c.res.Jobs = append(c.res.Jobs, rec)
	}
	if len(js) != len(c.claimed) {
		return fmt.Errorf("claimed %d rows of %d", len(js), len(c.claimed))
	}
	return nil
}

// nextRunAt returns the earliest time a claimable job of wants left
// behind may be claimed (zero: none), leaving out the jobs held until a
// running job ends: per kind and priority, rows are read in run_at order
// until one may start (at its run_at, or later when a bucket or a
// breaker's cool-down holds it) or run_at passes the earliest found.
func (c *flowClaiming) nextRunAt(wants []*flowWant) (time.Time, error) {
	now := c.w.now
	var next time.Time
	for _, fw := range wants {
		var at time.Time
		if f := fw.f; f != nil {
			hold, bat := fw.breakerHold(now)
			if hold || (f.cfg.Concurrency > 0 && fw.running >= int64(f.cfg.Concurrency)) {
				continue
			}
			at = bat
			if r := f.cfg.Rate; !r.IsZero() && r.Available(f.tat, now) == 0 {
				at = latest(at, r.NextAt(f.tat))
			}
		}
		for _, prio := range store.Priorities {
			st := &flowStream{fw: fw, prio: prio, bound: math.MaxInt64}
			for {
				r, err := st.head(c)
				if err != nil {
					return time.Time{}, err
				}
				if r == nil || (!next.IsZero() && r.runAt >= toUS(next)) {
					break
				}
				st.pos++
				hold, pat, err := c.partHeld(fw, r.part)
				if err != nil {
					return time.Time{}, err
				}
				if hold {
					continue
				}
				if r.seqKey.Valid {
					ok, err := c.seqAllows(fw, r)
					if err != nil {
						return time.Time{}, err
					}
					if !ok {
						continue
					}
				}
				if t := latest(fromUS(r.runAt), at, pat); next.IsZero() || t.Before(next) {
					next = t
				}
				break
			}
		}
	}
	return next, nil
}

// latest returns the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}
