package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// claimKind is one kind of a flow claim: what the caller asks, the kind's
// stored flow row (nil: none) and what the claim decided and took.
type claimKind struct {
	kind  string
	limit int32 // the caller's limit, then cut by the rate and the breaker
	flow  *flowRow
	conc  int32 // concurrency cap for this claim (0: none)
	probe bool  // the breaker lets one probe start (open past its cool-down, or half-open)
	// holdAt is when the breaker's cool-down ends (zero: it does not hold).
	holdAt time.Time
	taken  int
	// gate: a claim in one round trip of a kind with a breaker, which
	// the statement lets start jobs only while the breaker is closed
	// with no verdict waiting to be folded.
	gate bool
	// folded: the claim folded verdicts of callers' transactions into
	// the breaker (flow.seqs), which it writes back before claiming.
	folded bool
	// parts are the kind's partition breakers that are not closed, by
	// key, as the claim decided with them (partitionbreaker.go).
	parts map[string]*partBreak
}

// parted reports whether the kind's jobs are claimed partition by
// partition.
func (k *claimKind) parted() bool {
	return k.flow != nil && !k.flow.cfg.Partition.IsZero() &&
		(k.flow.cfg.PartitionConcurrency > 0 || !k.flow.cfg.PartitionRate.IsZero() || !k.flow.cfg.PartitionBreaker.IsZero())
}

// claimFlow is Claim for kinds under flow control (or with sequences, or
// with priority aging asked for), in one transaction: it locks the kinds'
// flows rows in kind order, reads the clock once they are held, claims
// the jobs in one statement that also applies the concurrency limits,
// rate buckets, sequences and partitions, reads what is left for
// NextRunAt, and commits. Without breakers or partition rates (see
// oneTrip) all of it is one batch; otherwise the locks come first, Go
// decides what each kind may start (breaker, partition rate), and the
// rest is a second batch. Either way the server runs the last batch
// without waiting for this host, so a kind's row is held for little more
// than the claim statement. Claims of one kind with a concurrency limit
// or a rate are serialized by its row (FOR UPDATE); claims in one round
// trip of kinds with at most breakers share it (FOR SHARE, readsOnly);
// claims of other kinds are not held.
func (s *Store) claimFlow(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("pgstore: claim: nil params: %w", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	kinds, seen := claimKinds(params)
	res := &store.ClaimResult{Jobs: []*store.JobRecord{}}
	if len(kinds) == 0 {
		now, err := s.Now(ctx)
		res.Now = now
		return res, err
	}
	snap, err := s.flowKinds(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	defer releaseConn(conn)
	q := s.flowQ()
	if err := s.sweepUnkeyed(ctx, conn.Conn(), q, snap, kinds); err != nil {
		return nil, fmt.Errorf("pgstore: claim: mark unkeyed jobs: %w", err)
	}
	if !oneTrip(snap, kinds) {
		if err := s.claimDecided(ctx, conn.Conn(), q, params, kinds, seen, res); err != nil {
			return nil, fmt.Errorf("pgstore: claim: %w", invalidData(err))
		}
		return res, nil
	}
	gated, err := s.claimAndCommit(ctx, conn.Conn(), q, params, kinds, seen, nil, res)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	if !gated {
		return res, nil
	}
	// A breaker was not closed: what the claim left is claimed again,
	// with Go deciding (a probe, or nothing until the cool-down ends).
	// That result's Now and NextRunAt are the ones that count.
	again := *params
	again.Limit -= len(res.Jobs)
	again.Kinds = nil
	for _, k := range kinds {
		again.Kinds = append(again.Kinds, store.KindLimit{Kind: k.kind, Limit: int(k.limit) - k.taken})
	}
	kinds, seen = claimKinds(&again)
	res2 := &store.ClaimResult{Jobs: res.Jobs}
	if err := s.claimDecided(ctx, conn.Conn(), q, &again, kinds, seen, res2); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	return res2, nil
}

// claimDecided claims in two round trips: the locks and the clock, then,
// once Go decided what each kind may start, the claim and COMMIT.
func (s *Store) claimDecided(ctx context.Context, conn *pgx.Conn, q *flowQueries, params *store.ClaimParams,
	kinds []*claimKind, seen map[string]*claimKind, res *store.ClaimResult) error {
	now, err := s.lockClaimKinds(ctx, conn, q, kinds, seen)
	if err != nil {
		return err
	}
	for _, k := range kinds {
		if f := k.flow; f != nil && len(f.seqs) > 0 {
			// Verdicts of callers' transactions (CompleteTx) first: the
			// decision below sees the breaker with them.
			res.Breakers = append(res.Breakers, f.fold(k.kind, now)...)
			k.folded = true
		}
		k.decide(now)
	}
	if err := readPartBreakers(ctx, conn, q, kinds, now); err != nil {
		return err
	}
	_, err = s.claimAndCommit(ctx, conn, q, params, kinds, seen, &now, res)
	return err
}

// claimKinds returns the kinds params asks for, a kind listed twice once
// with the smaller limit, each limit at most the total.
func claimKinds(params *store.ClaimParams) ([]*claimKind, map[string]*claimKind) {
	var kinds []*claimKind
	seen := make(map[string]*claimKind, len(params.Kinds))
	for _, kl := range params.Kinds {
		lim := int32(max(0, min(kl.Limit, params.Limit, 1<<30)))
		if k := seen[kl.Kind]; k != nil {
			k.limit = min(k.limit, lim)
			continue
		}
		k := &claimKind{kind: kl.Kind, limit: lim}
		seen[kl.Kind] = k
		kinds = append(kinds, k)
	}
	return kinds, seen
}

// oneTrip reports whether a claim of kinds needs no decision in Go (no
// partition rate among their cached settings; the claim statement applies
// concurrency limits and kinds' rate buckets, and starts jobs of a kind
// with a breaker only while it is closed, the usual case, leaving the
// rest to a second claim decided in Go), and so
// goes in one round trip: BEGIN, the locks, the claim and COMMIT in one
// batch, which the server runs back to back, so that the kinds' rows are
// held only while it runs (a round trip to a busy host can take
// milliseconds, and every claim of the kind queues behind it). The
// concurrency limits then come from the cached settings, at most
// flowCacheTTL old, as for a host that has not yet read new settings;
// the rate bucket is the one in the locked row.
func oneTrip(snap flowSnapshot, kinds []*claimKind) bool {
	for _, k := range kinds {
		cfg := snap.kinds[k.kind]
		if cfg == nil {
			continue
		}
		if !cfg.PartitionRate.IsZero() || !cfg.PartitionBreaker.IsZero() {
			return false // decided in Go: the partition rate, or partition breakers
		}
	}
	for _, k := range kinds {
		if cfg := snap.kinds[k.kind]; cfg != nil {
			k.flow = &flowRow{cfg: *cfg}
			k.conc = int32(cfg.Concurrency)
			k.gate = !cfg.Breaker.IsZero()
		}
	}
	return true
}

// readsOnly reports whether a claim in one round trip of kinds writes
// none of their flows rows: by the cached settings, no kind has a rate
// (whose bucket the claim draws) or a concurrency limit (whose count
// must not change between the claim's count and its commit), so at most
// breakers, which that claim only reads (a probe is decided in Go, in
// claimDecided, under FOR UPDATE).
func readsOnly(kinds []*claimKind) bool {
	for _, k := range kinds {
		if f := k.flow; f != nil && (f.cfg.Concurrency > 0 || f.cfg.PartitionConcurrency > 0 ||
			!f.cfg.Rate.IsZero() || !f.cfg.PartitionRate.IsZero()) {
			return false
		}
	}
	return true
}

// queueLock queues, on b, BEGIN, the transaction's settings and the lock
// of the kinds' flows rows (kind order; shared when share is set), then
// the clock once they are held.
func queueLock(b *pgx.Batch, q *flowQueries, kinds []*claimKind, share bool) {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.kind
	}
	b.Queue(`BEGIN`)
	// ax.flow_claim lets the sequence guard pass this transaction's
	// claims. Generic plans: the claim statement takes PostgreSQL longer
	// to plan (1.5 ms) than to run (0.5 ms), and its plan does not
	// depend on the values, all of them arrays and limits. No wait for
	// the WAL flush at commit: the kinds' rows are held until the
	// commit, and every claim of the kind queues behind it (a rate limit
	// of hundreds per second is a claim every few milliseconds). A claim
	// lost in a server crash leaves its jobs claimable; their holders'
	// outcomes are then refused (lease lost) and the jobs run again, as
	// after a rescue: at least once, as always. No JIT: see jitOffSQL.
	b.Queue(`SELECT set_config('ax.flow_claim', 'on', true), ` + genericPlan + `, ` + syncOff + `, ` + jitOff)
	if share {
		b.Queue(q.shareMany, names)
	} else {
		b.Queue(q.lockMany, names)
	}
	// The clock once the locks are held, also kept for the claim
	// statement of a claim in one round trip (whose $11 is NULL), so
	// that the claim and ClaimResult.Now agree.
	b.Queue(`SELECT c.t, set_config('ax.flow_now', c.t::text, true) FROM (SELECT clock_timestamp() AS t) c`)
}

// readLock reads what queueLock queued: the locked rows (into the kinds'
// flow) and the clock.
func readLock(br pgx.BatchResults, seen map[string]*claimKind) (time.Time, error) {
	if _, err := br.Exec(); err != nil {
		return time.Time{}, fmt.Errorf("begin: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return time.Time{}, fmt.Errorf("mark flow claim: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return time.Time{}, fmt.Errorf("lock flow kinds: %w", err)
	}
	var (
		kind         string
		cfg, breaker []byte
		tat          *time.Time
		verdicts     []bool
		seqs         []int64
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &cfg, &breaker, &tat, &verdicts, &seqs}, func() error {
		f := &flowRow{tat: tat, verdicts: verdicts, seqs: seqs}
		if err := f.decode(cfg, breaker); err != nil {
			return err
		}
		seen[kind].flow = f
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("lock flow kinds: %w", err)
	}
	var (
		now  time.Time
		kept string
	)
	if err := br.QueryRow().Scan(&now, &kept); err != nil {
		return time.Time{}, fmt.Errorf("read clock: %w", err)
	}
	return now, nil
}

// lockClaimKinds sends queueLock's batch and reads it: the first round
// trip of a claim whose limits Go decides.
func (s *Store) lockClaimKinds(ctx context.Context, conn *pgx.Conn, q *flowQueries, kinds []*claimKind, seen map[string]*claimKind) (time.Time, error) {
	b := &pgx.Batch{}
	queueLock(b, q, kinds, false)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	now, err := readLock(br, seen)
	if err != nil {
		return time.Time{}, err
	}
	return now, br.Close()
}

// decide cuts the kind's limit by its rate bucket and its breaker, at now.
func (k *claimKind) decide(now time.Time) {
	f := k.flow
	if f == nil {
		return
	}
	k.conc = int32(f.cfg.Concurrency)
	if r := f.cfg.Rate; !r.IsZero() {
		k.limit = min(k.limit, int32(r.Available(tatOf(f.tat), now)))
	}
	b := &f.breaker
	switch {
	case f.cfg.Breaker.IsZero() || b.Closed():
	case b.State == store.BreakerOpen && now.Before(b.ProbeAt):
		k.limit, k.holdAt = 0, b.ProbeAt
	default:
		// Open past its cool-down, or half-open: one probe, and only
		// while none of the kind runs.
		k.probe = true
		k.limit = min(k.limit, 1)
		k.conc = 1
	}
}

// claimAndCommit sends the claim statement, COMMIT and the read of what
// is left in one batch (preceded by the locks for a claim in one round
// trip, at nil; gated then reports that a kind's breaker was not closed,
// so the statement started none of its jobs), records the jobs taken, applies to the kinds'
// flowRow what the statement drew (rate buckets, probes), and computes
// NextRunAt: the earliest run_at of a job that may start, pushed to when a
// rate bucket or a breaker allows it; kinds and partitions held until a
// running job ends are left out (their end notifies).
func (s *Store) claimAndCommit(ctx context.Context, conn *pgx.Conn, q *flowQueries, params *store.ClaimParams,
	kinds []*claimKind, seen map[string]*claimKind, at *time.Time, res *store.ClaimResult) (gated bool, err error) {
	var now time.Time
	if at != nil {
		now = *at
	}
	n := len(kinds)
	var (
		names   = make([]string, n)
		lims    = make([]int32, n)
		concs   = make([]int32, n)
		parted  = make([]bool, n)
		pconcs  = make([]int32, n)
		pbursts = make([]int32, n)
		pints   = make([]int64, n)
		rints   = make([]int64, n)
		rbursts = make([]int32, n)
		gates   = make([]bool, n)
		probes  = make([]*string, n)
	)
	for i, k := range kinds {
		names[i], lims[i], concs[i], parted[i], gates[i] = k.kind, k.limit, k.conc, k.parted(), k.gate
		f := k.flow
		if f == nil {
			continue
		}
		if parted[i] {
			pconcs[i] = int32(f.cfg.PartitionConcurrency)
			if r := f.cfg.PartitionRate; !r.IsZero() {
				pbursts[i], pints[i] = int32(r.Burst()), micros(r.Interval())
			}
		}
		if r := f.cfg.Rate; !r.IsZero() {
			rints[i], rbursts[i] = micros(r.Interval()), int32(r.Burst())
		}
		if k.probe {
			b := f.breaker
			if b.Probe(k.kind, now) != nil {
				raw, err := json.Marshal(&b)
				if err != nil {
					return false, err
				}
				str := string(raw)
				probes[i] = &str
			}
		}
	}
	b := &pgx.Batch{}
	if at == nil {
		// One trip: the claim reads the time itself. Claims that only
		// read the rows (breakers) share them: three hosts released by
		// a closing breaker claim at once instead of one after another.
		queueLock(b, q, kinds, readsOnly(kinds))
	}
	folded, err := queueFold(b, q, kinds)
	if err != nil {
		return false, err
	}
	pbKinds, pbKeys, pbModes, pbProbes, err := partArgs(kinds, now)
	if err != nil {
		return false, err
	}
	b.Queue(q.claim, names, lims, concs, parted, pconcs, pbursts, pints,
		int32(min(params.Limit, 1<<30)), params.Owner, micros(params.LeaseDuration), at, micros(params.AgeAfter),
		rints, probes, rbursts, gates, pbKinds, pbKeys, pbModes, pbProbes)
	b.Queue(`COMMIT`)
	// What is left is read after the commit, so that the kinds' rows
	// are not held for it: in the batch's next implicit transaction,
	// without JIT.
	b.Queue(jitOffSQL)
	b.Queue(q.next, names, parted)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if at == nil {
		// The limits came from the cached settings: the rows locked
		// are read and dropped.
		locked := make(map[string]*claimKind, len(seen))
		for kind := range seen {
			locked[kind] = &claimKind{kind: kind}
		}
		var err error
		if now, err = readLock(br, locked); err != nil {
			return false, err
		}
		for _, k := range kinds {
			if l := locked[k.kind]; k.gate && l.flow != nil && (!l.flow.breaker.Closed() || len(l.flow.seqs) > 0) {
				gated = true // the statement started nothing of the kind
			}
		}
	}
	if folded {
		if _, err := br.Exec(); err != nil {
			return false, fmt.Errorf("fold breaker verdicts: %w", err)
		}
	}
	res.Now = now
	rows, err := br.Query()
	if err != nil {
		return false, fmt.Errorf("claim jobs: %w", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return false, fmt.Errorf("claim jobs: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	if tag.String() != "COMMIT" {
		return false, fmt.Errorf("commit: the server answered %q", tag.String())
	}
	if _, err := br.Exec(); err != nil {
		return false, fmt.Errorf("turn JIT off: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return false, fmt.Errorf("read next run time: %w", err)
	}
	type left struct {
		kind, key     string
		runAt         *time.Time
		running, prun int64
		partTAT       *time.Time
		kindTAT       *time.Time
	}
	var lefts []left
	var l left
	if _, err := pgx.ForEachRow(rows, []any{&l.kind, &l.key, &l.runAt, &l.running, &l.prun, &l.partTAT, &l.kindTAT}, func() error {
		lefts = append(lefts, l)
		return nil
	}); err != nil {
		return false, fmt.Errorf("read next run time: %w", err)
	}
	if err := br.Close(); err != nil {
		return false, err
	}

	for _, j := range jobs {
		seen[j.Kind].taken++
	}
	res.Jobs = append(res.Jobs, jobs...)
	for _, k := range kinds {
		f := k.flow
		if f == nil || k.taken == 0 {
			continue
		}
		if k.probe {
			if t := f.breaker.Probe(k.kind, now); t != nil {
				res.Breakers = append(res.Breakers, *t)
			}
		}
	}
	res.Breakers = append(res.Breakers, partProbes(seen, jobs, now)...)
	for _, l := range lefts {
		if f := seen[l.kind].flow; f != nil {
			f.tat = l.kindTAT // the bucket as the claim left it
		}
	}
	var next time.Time
	for _, l := range lefts {
		if l.runAt == nil {
			continue
		}
		at, ok := seen[l.kind].readyAt(*l.runAt, l.key, l.running, l.prun, tatOf(l.partTAT), now)
		if ok && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	res.NextRunAt = next
	return gated, nil
}

// queueFold queues, on b, the write of the breakers a claim folded
// verdicts into and the delete of those verdicts, and reports whether it
// queued anything.
func queueFold(b *pgx.Batch, q *flowQueries, kinds []*claimKind) (bool, error) {
	var (
		names    []string
		breakers []string
		seqs     []int64
	)
	for _, k := range kinds {
		if !k.folded {
			continue
		}
		raw, err := json.Marshal(&k.flow.breaker)
		if err != nil {
			return false, err
		}
		names, breakers, seqs = append(names, k.kind), append(breakers, string(raw)), append(seqs, k.flow.seqs...)
	}
	if len(names) == 0 {
		return false, nil
	}
	b.Queue(q.foldVerdicts, names, breakers, seqs)
	return true, nil
}

// readyAt returns when a job of the kind due at runAt, in partition key
// with prun running jobs and rate bucket partTAT, may start, given the
// kind's running jobs and the partition's breaker; ok is false when it
// waits for a running job to end.
func (k *claimKind) readyAt(runAt time.Time, key string, running, prun int64, partTAT, now time.Time) (at time.Time, ok bool) {
	f := k.flow
	if f == nil {
		return runAt, true
	}
	cfg := &f.cfg
	switch {
	case cfg.Concurrency > 0 && running >= int64(cfg.Concurrency):
		return time.Time{}, false
	case !k.holdAt.IsZero():
		at = k.holdAt
	case !cfg.Breaker.IsZero() && !f.breaker.Closed():
		// A probe runs, or was just started: the next one waits for
		// its end; none running (a lost probe) lets one start now.
		if running > 0 {
			return time.Time{}, false
		}
	}
	if r := cfg.Rate; !r.IsZero() && r.Available(tatOf(f.tat), now) == 0 {
		at = latest(at, r.NextAt(tatOf(f.tat)))
	}
	if k.parted() {
		if cfg.PartitionConcurrency > 0 && prun >= int64(cfg.PartitionConcurrency) {
			return time.Time{}, false
		}
		if r := cfg.PartitionRate; !r.IsZero() && r.Available(partTAT, now) == 0 {
			at = latest(at, r.NextAt(partTAT))
		}
		var ok bool
		if at, ok = k.partReadyAt(key, prun, at); !ok {
			return time.Time{}, false
		}
	}
	return latest(runAt, at), true
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
