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
}

// parted reports whether the kind's jobs are claimed partition by
// partition.
func (k *claimKind) parted() bool {
	return k.flow != nil && !k.flow.cfg.Partition.IsZero() &&
		(k.flow.cfg.PartitionConcurrency > 0 || !k.flow.cfg.PartitionRate.IsZero())
}

// claimFlow is Claim for kinds under flow control (or with sequences, or
// with priority aging asked for), in one transaction: the kinds' flows
// rows are locked in kind order, the clock read, what each kind may start
// decided (rate bucket, breaker), the jobs claimed in one statement that
// also applies the concurrency limits, sequences and partitions, the
// buckets and breakers written back, and what is left read for NextRunAt.
// Claims of one flow-controlled kind are serialized by its row; claims of
// other kinds are not held.
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
	var kinds []*claimKind
	seen := make(map[string]*claimKind, len(params.Kinds))
	names := make([]string, 0, len(params.Kinds))
	for _, kl := range params.Kinds {
		lim := int32(min(kl.Limit, params.Limit, 1<<30))
		if k := seen[kl.Kind]; k != nil {
			k.limit = min(k.limit, lim)
			continue
		}
		k := &claimKind{kind: kl.Kind, limit: lim}
		seen[kl.Kind] = k
		kinds = append(kinds, k)
		names = append(names, kl.Kind)
	}
	res := &store.ClaimResult{Jobs: []*store.JobRecord{}}
	if len(kinds) == 0 {
		now, err := s.Now(ctx)
		res.Now = now
		return res, err
	}
	q := s.flowQ()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := s.lockClaimKinds(ctx, tx, q, names, seen)
		if err != nil {
			return err
		}
		res.Now = now
		for _, k := range kinds {
			k.decide(now)
		}
		if err := s.claimFlowJobs(ctx, tx, q, params, kinds, seen, now, res); err != nil {
			return err
		}
		return s.settleClaim(ctx, tx, q, kinds, now, res)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	return res, nil
}

// lockClaimKinds marks the transaction as a flow claim (so the sequence
// guard lets it start jobs of sequences), locks the kinds' flows rows in
// kind order, and returns the clock read after the locks were granted.
func (s *Store) lockClaimKinds(ctx context.Context, tx pgx.Tx, q *flowQueries, names []string, seen map[string]*claimKind) (time.Time, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('ax.flow_claim', 'on', true)`)
	b.Queue(q.lockMany, names)
	b.Queue(`SELECT clock_timestamp()`)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
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
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &cfg, &breaker, &tat}, func() error {
		f := &flowRow{tat: tat}
		if err := f.decode(cfg, breaker); err != nil {
			return err
		}
		seen[kind].flow = f
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("lock flow kinds: %w", err)
	}
	var now time.Time
	if err := br.QueryRow().Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read clock: %w", err)
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

// claimFlowJobs runs the claim statement and records the jobs taken.
func (s *Store) claimFlowJobs(ctx context.Context, tx pgx.Tx, q *flowQueries, params *store.ClaimParams,
	kinds []*claimKind, seen map[string]*claimKind, now time.Time, res *store.ClaimResult) error {
	n := len(kinds)
	var (
		names   = make([]string, n)
		lims    = make([]int32, n)
		concs   = make([]int32, n)
		parted  = make([]bool, n)
		pconcs  = make([]int32, n)
		pbursts = make([]int32, n)
		pints   = make([]int64, n)
	)
	for i, k := range kinds {
		names[i], lims[i], concs[i], parted[i] = k.kind, k.limit, k.conc, k.parted()
		if parted[i] {
			cfg := &k.flow.cfg
			pconcs[i] = int32(cfg.PartitionConcurrency)
			if !cfg.PartitionRate.IsZero() {
				pbursts[i] = int32(cfg.PartitionRate.Burst())
				pints[i] = micros(cfg.PartitionRate.Interval())
			}
		}
	}
	rows, err := tx.Query(ctx, q.claim, names, lims, concs, parted, pconcs, pbursts, pints,
		int32(min(params.Limit, 1<<30)), params.Owner, micros(params.LeaseDuration), now, micros(params.AgeAfter))
	if err != nil {
		return fmt.Errorf("claim jobs: %w", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return fmt.Errorf("claim jobs: %w", err)
	}
	for _, j := range jobs {
		seen[j.Kind].taken++
	}
	res.Jobs = append(res.Jobs, jobs...)
	return nil
}

// settleClaim writes back the buckets and breakers the claim drew on,
// then reads what is left for NextRunAt: the earliest run_at of a job that
// may start, pushed to when a rate bucket or a breaker allows it; kinds
// and partitions held until a running job ends are left out (their end
// notifies).
func (s *Store) settleClaim(ctx context.Context, tx pgx.Tx, q *flowQueries, kinds []*claimKind, now time.Time, res *store.ClaimResult) error {
	var (
		tkinds   []string
		tats     []*time.Time
		breakers []string
		skinds   []string // a partition bucket per start
		skeys    []string
		ikinds   []string
		ints     []int64
	)
	names := make([]string, len(kinds))
	parted := make([]bool, len(kinds))
	for i, k := range kinds {
		names[i], parted[i] = k.kind, k.parted()
		f := k.flow
		if f == nil || k.taken == 0 {
			continue
		}
		changed := false
		if r := f.cfg.Rate; !r.IsZero() {
			t := r.Take(tatOf(f.tat), now, k.taken)
			f.tat, changed = &t, true
		}
		if k.probe {
			if t := f.breaker.Probe(k.kind, now); t != nil {
				res.Breakers = append(res.Breakers, *t)
				changed = true
			}
		}
		if changed {
			raw, err := json.Marshal(&f.breaker)
			if err != nil {
				return err
			}
			tkinds, tats, breakers = append(tkinds, k.kind), append(tats, f.tat), append(breakers, string(raw))
		}
		if parted[i] && !f.cfg.PartitionRate.IsZero() {
			ikinds, ints = append(ikinds, k.kind), append(ints, micros(f.cfg.PartitionRate.Interval()))
		}
	}
	if len(ikinds) > 0 {
		for _, j := range res.Jobs {
			skinds, skeys = append(skinds, j.Kind), append(skeys, j.PartitionKey)
		}
	}
	b := &pgx.Batch{}
	if len(tkinds) > 0 || len(ikinds) > 0 {
		b.Queue(q.setBuckets, tkinds, tats, breakers, now, skinds, skeys, ikinds, ints)
	}
	b.Queue(q.next, names, parted)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if len(tkinds) > 0 || len(ikinds) > 0 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("store rate buckets and breakers: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("read next run time: %w", err)
	}
	byName := make(map[string]*claimKind, len(kinds))
	for _, k := range kinds {
		byName[k.kind] = k
	}
	var (
		kind, key     string
		runAt         *time.Time
		running, prun int64
		partTAT       *time.Time
		next          time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &key, &runAt, &running, &prun, &partTAT}, func() error {
		if runAt == nil {
			return nil
		}
		k := byName[kind]
		at, ok := k.readyAt(*runAt, running, prun, tatOf(partTAT), now)
		if ok && (next.IsZero() || at.Before(next)) {
			next = at
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read next run time: %w", err)
	}
	res.NextRunAt = next
	return br.Close()
}

// readyAt returns when a job of the kind due at runAt, in a partition with
// prun running jobs and rate bucket partTAT, may start, given the kind's
// running jobs; ok is false when it waits for a running job to end.
func (k *claimKind) readyAt(runAt time.Time, running, prun int64, partTAT, now time.Time) (at time.Time, ok bool) {
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
