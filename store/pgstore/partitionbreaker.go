package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Partition breakers (store.PartitionBreakerStore): each failing
// partition of a kind with FlowConfig.PartitionBreaker has a row in
// flow_partition_breakers (migration 0019), read and written only while
// the kind's flows row is held FOR UPDATE:
//
//   - a claim of such a kind is decided in Go (never in one round trip):
//     with the row held it reads the partitions whose breaker is not
//     closed, and the claim statement starts none of the jobs of a
//     partition open before its cool-down ends, and at most one (a
//     probe, only while none of the partition runs) of one open past it
//     or half-open, storing the half-open breaker when it takes the
//     probe;
//   - FinishFlow feeds each applied outcome to its partition's breaker
//     (and the kind's), creating the row at a failure and deleting it when
//     a success leaves it closed with no failure counted; a success in a
//     partition without a row changes nothing and takes no lock;
//   - the end of a running job of a partition whose breaker is not closed
//     notifies listeners of the kind (its probe, or the wait for one, is
//     over).
//
// Outcomes written by CompleteTx in a caller's transaction do not feed
// partition breakers (the kind's breaker gets them through
// flow_breaker_verdicts): feeding them would hold the kind's row until
// the caller commits.

var _ store.PartitionBreakerStore = (*Store)(nil)

// partBreak is a partition's breaker as a claim decided with it.
type partBreak struct {
	breaker store.BreakerStatus
	// probe: the claim may start one probe (only while none of the
	// partition runs); otherwise none of its jobs starts until at.
	probe bool
	at    time.Time
}

// readPartBreakers reads, in the claim's transaction on conn (the kinds'
// rows held), the partition breakers of kinds that are not closed, and
// decides what each lets the claim start at now.
func readPartBreakers(ctx context.Context, conn *pgx.Conn, q *flowQueries, kinds []*claimKind, now time.Time) error {
	var names []string
	byName := map[string]*claimKind{}
	for _, k := range kinds {
		if k.flow != nil && !k.flow.cfg.PartitionBreaker.IsZero() {
			names = append(names, k.kind)
			byName[k.kind] = k
		}
	}
	if len(names) == 0 {
		return nil
	}
	rows, _ := conn.Query(ctx, q.openPartBreakers, names)
	var (
		kind, key string
		raw       []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&kind, &key, &raw}, func() error {
		var pb partBreak
		if err := json.Unmarshal(raw, &pb.breaker); err != nil {
			return fmt.Errorf("decode breaker of %q partition %q: %w", kind, key, err)
		}
		// Running jobs are counted by the claim statement.
		ok, probe, at := pb.breaker.PartitionBreakerHold(now, 0)
		pb.probe, pb.at = ok && probe, at
		k := byName[kind]
		if k.parts == nil {
			k.parts = map[string]*partBreak{}
		}
		k.parts[key] = &pb
		return nil
	})
	if err != nil {
		return fmt.Errorf("read partition breakers: %w", err)
	}
	return nil
}

// partArgs returns the claim statement's partition breaker arrays ($17
// kinds, $18 keys, $19 modes: 0 none starts, 1 one probe; $20 the
// half-open breaker to store when the claim takes a probe of a partition
// that was open, NULL otherwise).
func partArgs(kinds []*claimKind, now time.Time) (names, keys []string, modes []int32, probes []*string, err error) {
	names, keys, modes, probes = []string{}, []string{}, []int32{}, []*string{}
	for _, k := range kinds {
		for key, pb := range k.parts {
			names, keys = append(names, k.kind), append(keys, key)
			if !pb.probe {
				modes, probes = append(modes, 0), append(probes, nil)
				continue
			}
			modes = append(modes, 1)
			b := pb.breaker
			if b.Probe(k.kind, now) == nil {
				probes = append(probes, nil) // half-open already
				continue
			}
			raw, err := json.Marshal(&b)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			str := string(raw)
			probes = append(probes, &str)
		}
	}
	return names, keys, modes, probes, nil
}

// partProbes returns the transitions of the partition breakers whose
// probe the claim started (jobs, of its kinds), once per partition.
func partProbes(seen map[string]*claimKind, jobs []*store.JobRecord, now time.Time) []store.BreakerTransition {
	var out []store.BreakerTransition
	for _, j := range jobs {
		k := seen[j.Kind]
		if k == nil || k.parts == nil {
			continue
		}
		pb := k.parts[j.PartitionKey]
		if pb == nil || !pb.probe {
			continue
		}
		if t := pb.breaker.Probe(j.Kind, now).ForPartition(j.PartitionKey); t != nil {
			out = append(out, *t)
		}
	}
	return out
}

// partReadyAt applies the partition breaker of key to a job of the kind
// that readyAt found ready at at, the partition running prun jobs after
// the claim: one open before its cool-down ends holds it until then; one
// that allows a probe holds it while a job of the partition runs (its
// end notifies).
func (k *claimKind) partReadyAt(key string, prun int64, at time.Time) (time.Time, bool) {
	pb := k.parts[key]
	switch {
	case pb == nil:
		return at, true
	case !pb.probe:
		return latest(at, pb.at), true
	case prun > 0:
		return time.Time{}, false
	}
	return at, true
}

// feedPartBreakers feeds verdicts, in order, to the breakers of their
// partitions, at now, in tx (the kinds' rows held), writes back what
// changed (deleting the breakers left closed with no failure counted),
// and appends the transitions to res.
func (s *Store) feedPartBreakers(ctx context.Context, tx pgx.Tx, rows map[string]*flowRow, verdicts []verdict,
	now time.Time, res *store.FinishResult) error {
	var kinds, keys []string
	for _, v := range verdicts {
		if f := rows[v.kind]; f != nil && !f.cfg.PartitionBreaker.IsZero() {
			kinds, keys = append(kinds, v.kind), append(keys, v.key)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	q := s.flowQ()
	type pk struct{ kind, key string }
	held := map[pk]*store.BreakerStatus{}
	r, _ := tx.Query(ctx, q.partBreakersOf, kinds, keys)
	var (
		kind, key string
		raw       []byte
	)
	_, err := pgx.ForEachRow(r, []any{&kind, &key, &raw}, func() error {
		var b store.BreakerStatus
		if err := json.Unmarshal(raw, &b); err != nil {
			return fmt.Errorf("decode breaker of %q partition %q: %w", kind, key, err)
		}
		held[pk{kind, key}] = &b
		return nil
	})
	if err != nil {
		return fmt.Errorf("read partition breakers: %w", err)
	}
	changed := map[pk]bool{}
	var order []pk
	for _, v := range verdicts {
		f := rows[v.kind]
		if f == nil || f.cfg.PartitionBreaker.IsZero() {
			continue
		}
		id := pk{v.kind, v.key}
		b := held[id]
		if b == nil {
			if !v.failed {
				continue // closed, nothing counted: nothing to reset
			}
			b = &store.BreakerStatus{}
			held[id] = b
		}
		if !changed[id] {
			changed[id] = true
			order = append(order, id)
		}
		if t := b.Observe(&f.cfg.PartitionBreaker, v.kind, v.failed, now).ForPartition(v.key); t != nil {
			res.Breakers = append(res.Breakers, *t)
		}
	}
	if len(order) == 0 {
		return nil
	}
	kinds, keys = kinds[:0], keys[:0]
	var breakers []*string
	for _, id := range order {
		kinds, keys = append(kinds, id.kind), append(keys, id.key)
		b := held[id]
		if b.Forgettable() {
			breakers = append(breakers, nil)
			continue
		}
		raw, err := json.Marshal(b)
		if err != nil {
			return err
		}
		str := string(raw)
		breakers = append(breakers, &str)
	}
	if _, err := tx.Exec(ctx, q.writePartBreaker, kinds, keys, breakers); err != nil {
		return fmt.Errorf("store partition breakers: %w", err)
	}
	return nil
}

// changesPartBreakers reports whether feeding verdicts to the breakers
// of their partitions may change any, as the finish statement saw them
// (rows, with each kind's partKeys): a failure always does (it counts,
// opens or reopens), a success only where the partition has a breaker.
func changesPartBreakers(rows map[string]*flowRow, verdicts []verdict) bool {
	for _, v := range verdicts {
		f := rows[v.kind]
		if f == nil || f.cfg.PartitionBreaker.IsZero() {
			continue
		}
		if v.failed || f.partKeys[v.key] {
			return true
		}
	}
	return false
}

// partBreakerKind locks kind's flows row in tx and returns it, or an
// error wrapping store.ErrNotFound when the kind has no partition breaker.
func partBreakerKind(ctx context.Context, tx pgx.Tx, q *flowQueries, kind string) (*flowRow, error) {
	var (
		f            flowRow
		cfg, breaker []byte
	)
	err := tx.QueryRow(ctx, q.lockOne, kind).Scan(&cfg, &breaker, &f.tat)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if err == nil {
		if err := f.decode(cfg, breaker); err != nil {
			return nil, err
		}
	}
	if f.cfg.PartitionBreaker.IsZero() {
		return nil, fmt.Errorf("%w: kind %q has no partition breaker", store.ErrNotFound, kind)
	}
	return &f, nil
}

// listPartBreakers reads kind's partition breakers (key nil: all), in tx.
func listPartBreakers(ctx context.Context, tx pgx.Tx, q *flowQueries, kind string, key *string) ([]store.PartitionBreakerState, error) {
	rows, _ := tx.Query(ctx, q.listPartBreakers, kind, key)
	out := []store.PartitionBreakerState{}
	var (
		p   store.PartitionBreakerState
		raw []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&p.PartitionKey, &raw, &p.Running, &p.Now}, func() error {
		p.Kind, p.Breaker = kind, store.BreakerStatus{}
		if err := json.Unmarshal(raw, &p.Breaker); err != nil {
			return fmt.Errorf("decode breaker of %q partition %q: %w", kind, p.PartitionKey, err)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// PartitionBreakers returns the breakers kept for kind's partitions
// (open, half_open, or closed with failures counted), ordered by key
// (bytewise), with their partitions' running jobs; see
// store.PartitionBreakerStore. A kind without a partition breaker fails
// with an error wrapping store.ErrNotFound.
func (s *Store) PartitionBreakers(ctx context.Context, kind string) ([]store.PartitionBreakerState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckPartitionBreaker("partition breakers", kind, ""); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	var out []store.PartitionBreakerState
	q := s.flowQ()
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var cfg []byte
		err := tx.QueryRow(ctx, `SELECT config FROM `+pgx.Identifier{s.schema, "flows"}.Sanitize()+` WHERE kind = $1`, kind).Scan(&cfg)
		var fc store.FlowConfig
		if err == nil {
			err = json.Unmarshal(cfg, &fc)
		}
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && fc.PartitionBreaker.IsZero()) {
			return fmt.Errorf("%w: kind %q has no partition breaker", store.ErrNotFound, kind)
		}
		if err != nil {
			return err
		}
		out, err = listPartBreakers(ctx, tx, q, kind, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: partition breakers of %q: %w", kind, err)
	}
	return out, nil
}

// SetPartitionBreaker opens (for the partition breaker's CoolDown) or
// closes the breaker of kind's partition key by hand, under the kind's
// lock; see store.PartitionBreakerStore. Closing notifies listeners of
// the kind.
func (s *Store) SetPartitionBreaker(ctx context.Context, kind, key string, open bool) (*store.SetPartitionBreakerResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	what := store.BreakerVerb(open) + " partition breaker"
	if err := store.CheckPartitionBreaker(what, kind, key); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	q := s.flowQ()
	res := &store.SetPartitionBreakerResult{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		f, err := partBreakerKind(ctx, tx, q, kind)
		if err != nil {
			return err
		}
		now, err := clockAfterLock(ctx, tx)
		if err != nil {
			return err
		}
		list, err := listPartBreakers(ctx, tx, q, kind, &key)
		if err != nil {
			return err
		}
		var b store.BreakerStatus
		if len(list) == 1 {
			b = list[0].Breaker
		}
		res.Transition = b.Set(&f.cfg.PartitionBreaker, kind, open, now).ForPartition(key)
		if res.Transition != nil {
			var raw *string
			if !b.Forgettable() {
				j, err := json.Marshal(&b)
				if err != nil {
					return err
				}
				str := string(j)
				raw = &str
			}
			if _, err := tx.Exec(ctx, q.writePartBreaker, []string{kind}, []string{key}, []*string{raw}); err != nil {
				return fmt.Errorf("store partition breaker: %w", err)
			}
			if !open {
				if _, err := tx.Exec(ctx, q.notifyKinds, s.channel, []string{kind}); err != nil {
					return err
				}
			}
		}
		var running int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.schema, "jobs"}.Sanitize()+
			` WHERE kind = $1 AND partition_key = $2 AND state = 'running'`, kind, key).Scan(&running); err != nil {
			return err
		}
		if b.State == "" {
			b.State = store.BreakerClosed
		}
		res.State = store.PartitionBreakerState{Kind: kind, PartitionKey: key, Breaker: b, Running: running, Now: now}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s of %q partition %q: %w", what, kind, key, err)
	}
	return res, nil
}

// prunePartBreakers forgets, for Prune, the closed breakers (counting
// failures) of partitions with no job scheduled, retrying or running.
func (s *Store) prunePartBreakers(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.flowQ().pruneBreakers); err != nil {
		return fmt.Errorf("forget idle partition breakers: %w", err)
	}
	return nil
}
