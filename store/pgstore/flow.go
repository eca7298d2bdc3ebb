package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Flow control (store.FlowStore). The settings and state of a kind live in
// the flows table (migration 0007); claims, finishes and inserts that
// involve a flow-controlled kind take the kind's row FOR UPDATE, in kind
// order, apply the limits, and write the rate bucket and the breaker back
// before committing, so that the limits hold for every host. Kinds without
// settings (and claims without priority aging) keep the plain one
// statement paths: the Store remembers, for a second, which kinds have
// settings or sequences (flowCache), so deciding costs nothing per call.

var _ store.FlowStore = (*Store)(nil)

// flowCacheTTL is how long a Store trusts its list of flow-controlled
// kinds. A host learns of settings declared by another host within this
// time (its own SetFlows clears the list at once). Jobs of a sequence are
// safe meanwhile: a trigger keeps any other claim from starting them.
const flowCacheTTL = time.Second

// flowCache is what a Store knows of flow control: its SQL, and the kinds
// with settings or sequences, read at most once per flowCacheTTL.
type flowCache struct {
	once sync.Once
	q    flowQueries

	mu       sync.Mutex
	loadedAt time.Time // host clock: only the cache's age matters
	kinds    map[string]*store.FlowConfig
	seqKinds map[string]bool
	// gen counts forgetFlows calls: a read that began before one does
	// not store what it read.
	gen uint64

	sweeps unkeyedSweeps // unkeyed.go
}

// flowSnapshot is the cache's content at one moment.
type flowSnapshot struct {
	kinds    map[string]*store.FlowConfig
	seqKinds map[string]bool
}

// flowQ returns the flow SQL, built on first use.
func (s *Store) flowQ() *flowQueries {
	s.flow.once.Do(func() { s.flow.q = buildFlowQueries(s.schema) })
	return &s.flow.q
}

// flowKinds returns the cached flow-controlled kinds, reading them again
// when the cache is older than flowCacheTTL. It reads on the connection
// ctx carries (a transaction the caller holds: withConn), never on a
// second one from the pool, and never while holding the cache's lock:
// callers that each held a pool connection while waiting for another,
// or for the lock held by one of them waiting for a connection, stalled
// until their deadlines once the pool was exhausted (seen with ten
// racing producers of a MaxPending kind through PgBouncer, and again
// with racing inserts of one row and of several through PgBouncer once
// every insert derived partition keys). Callers that find the cache
// stale at once each read it; the reads are small.
func (s *Store) flowKinds(ctx context.Context) (flowSnapshot, error) {
	c := &s.flow
	c.mu.Lock()
	if c.kinds != nil && time.Since(c.loadedAt) < flowCacheTTL {
		snap := flowSnapshot{c.kinds, c.seqKinds}
		c.mu.Unlock()
		return snap, nil
	}
	gen := c.gen
	c.mu.Unlock()
	rows, _ := s.conn(ctx).Query(ctx, s.flowQ().kinds)
	kinds := map[string]*store.FlowConfig{}
	seq := map[string]bool{}
	var (
		kind string
		cfg  []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&kind, &cfg}, func() error {
		if cfg == nil {
			seq[kind] = true
			return nil
		}
		var fc store.FlowConfig
		if err := json.Unmarshal(cfg, &fc); err != nil {
			return fmt.Errorf("decode flow settings of %q: %w", kind, err)
		}
		kinds[kind] = &fc
		return nil
	})
	if err != nil {
		return flowSnapshot{}, fmt.Errorf("read flow-controlled kinds: %w", err)
	}
	c.mu.Lock()
	if c.gen == gen {
		c.kinds, c.seqKinds, c.loadedAt = kinds, seq, time.Now()
	}
	c.mu.Unlock()
	return flowSnapshot{kinds, seq}, nil
}

// forgetFlows makes the next flowKinds read the table again.
func (s *Store) forgetFlows() {
	s.flow.mu.Lock()
	s.flow.kinds = nil
	s.flow.gen++
	s.flow.mu.Unlock()
}

// flowActive reports whether a claim must take the flow path: a
// requested kind has settings that hold claims back, or sequences.
// Priority aging alone does not: the plain claim applies it too. An error reading the kinds is reported by the flow
// path itself.
func (s *Store) flowActive(ctx context.Context, params *store.ClaimParams) bool {
	if params == nil {
		return false
	}
	snap, err := s.flowKinds(ctx)
	if err != nil {
		return true
	}
	for _, k := range params.Kinds {
		if cfg := snap.kinds[k.Kind]; (cfg != nil && cfg.HoldsClaims()) || snap.seqKinds[k.Kind] {
			return true
		}
	}
	return false
}

// flowFinishes reports whether Finish must take the flow path (which
// feeds breakers and tells listeners of freed slots): some kind has
// settings. Finish does not know its jobs' kinds without reading them.
func (s *Store) flowFinishes(ctx context.Context) bool {
	snap, err := s.flowKinds(ctx)
	return err != nil || len(snap.kinds) > 0
}

// flowRow is one row of the flows table.
type flowRow struct {
	cfg        store.FlowConfig
	declaredBy string
	declaredAt time.Time
	breaker    store.BreakerStatus
	tat        *time.Time
	// verdicts are the verdicts callers' transactions recorded for the
	// kind and not yet folded into breaker (failed, in order), seqs
	// their rows in flow_breaker_verdicts; read with the row locked.
	// hasVerdicts: the finish statement saw some (it reads neither).
	verdicts    []bool
	seqs        []int64
	hasVerdicts bool
	// partKeys are the partitions of the kind whose breaker the finish
	// statement saw kept (with PartitionBreaker).
	partKeys map[string]bool
}

// fold feeds the breaker the verdicts recorded in callers' transactions,
// in their order, at now (the clock once the row is held), and returns the
// transitions they made. The caller writes the breaker back and deletes
// the rows of f.seqs in the same transaction.
func (f *flowRow) fold(kind string, now time.Time) []store.BreakerTransition {
	var out []store.BreakerTransition
	if !f.cfg.Breaker.IsZero() {
		for _, failed := range f.verdicts {
			if t := f.breaker.Observe(&f.cfg.Breaker, kind, failed, now); t != nil {
				out = append(out, *t)
			}
		}
	}
	f.verdicts = nil
	return out
}

// scanFlowRow decodes the JSON columns of a flows row.
func (f *flowRow) decode(cfg, breaker []byte) error {
	if err := json.Unmarshal(cfg, &f.cfg); err != nil {
		return fmt.Errorf("decode flow settings: %w", err)
	}
	if err := json.Unmarshal(breaker, &f.breaker); err != nil {
		return fmt.Errorf("decode breaker of %q: %w", f.cfg.Kind, err)
	}
	return nil
}

// tatOf returns the bucket time (zero: full).
func tatOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// SetFlows stores each kind's flow settings in place of what was stored,
// as store.FlowStore documents, in one transaction: a config that sets
// nothing removes the kind's settings and state; the breaker's state is
// kept while the kind keeps a breaker, the rate bucket while it keeps a
// rate, and the partition buckets while it keeps the same partition source
// and a partition rate. Setting MaxPending on a kind that had none counts
// its pending jobs once (they are marked, and later counted by their state
// changes). Listeners are notified of every kind declared, since a limit
// may have grown. Invalid params fail with an error wrapping
// store.ErrInvalidParams and change nothing.
func (s *Store) SetFlows(ctx context.Context, params *store.SetFlowsParams) error {
	if err := s.check(); err != nil {
		return err
	}
	if params == nil {
		return fmt.Errorf("pgstore: set flows: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("pgstore: set flows: %w", err)
	}
	cfgs := slices.Clone(params.Flows)
	// Kind order, as claims lock kinds: two declarations cannot deadlock.
	slices.SortFunc(cfgs, func(a, b store.FlowConfig) int { return strings.Compare(a.Kind, b.Kind) })
	q := s.flowQ()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for i := range cfgs {
			if err := s.setFlow(ctx, tx, q, params.Node, &cfgs[i]); err != nil {
				return fmt.Errorf("kind %q: %w", cfgs[i].Kind, err)
			}
		}
		return nil
	})
	s.forgetFlows()
	if err != nil {
		return fmt.Errorf("pgstore: set flows: %w", invalidData(err))
	}
	return nil
}

// setFlow stores one kind's settings, in tx.
func (s *Store) setFlow(ctx context.Context, tx pgx.Tx, q *flowQueries, node string, cfg *store.FlowConfig) error {
	var old store.FlowConfig
	var raw []byte
	err := tx.QueryRow(ctx, q.lockOne, cfg.Kind).Scan(&raw, new([]byte), new(*time.Time))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		raw = nil
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(raw, &old); err != nil {
			return fmt.Errorf("decode stored settings: %w", err)
		}
	}
	if cfg.IsZero() {
		if raw == nil {
			return nil
		}
		if _, err := tx.Exec(ctx, q.deleteFlow, cfg.Kind); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, q.notifyKinds, s.channel, []string{cfg.Kind}) // what it held back may start
		return err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	keepParts := !cfg.PartitionRate.IsZero() && cfg.Partition == old.Partition
	keepPartBreakers := !cfg.PartitionBreaker.IsZero() && cfg.Partition == old.Partition
	if _, err := tx.Exec(ctx, q.upsertFlow, cfg.Kind, b, node, !cfg.Breaker.IsZero(), !cfg.Rate.IsZero(), keepParts, keepPartBreakers); err != nil {
		return err
	}
	if cfg.MaxPending > 0 && (raw == nil || old.MaxPending == 0) {
		if _, err := tx.Exec(ctx, q.recountPending, cfg.Kind); err != nil {
			return fmt.Errorf("count pending jobs: %w", err)
		}
	}
	_, err = tx.Exec(ctx, q.notifyKinds, s.channel, []string{cfg.Kind}) // a limit may have grown
	return err
}

// Flows returns the state of every kind with stored settings, ordered by
// kind, as store.FlowStore documents. Running counts the kind's running
// jobs (an index scan bounded by them); Now is the database's clock.
func (s *Store) Flows(ctx context.Context) ([]store.FlowState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out, err := s.readFlows(ctx, s.pool, "")
	if err != nil {
		return nil, fmt.Errorf("pgstore: flows: %w", err)
	}
	return out, nil
}

// readFlows reads the state of one kind, or of all ("").
func (s *Store) readFlows(ctx context.Context, q querier, kind string) ([]store.FlowState, error) {
	rows, _ := q.Query(ctx, s.flowQ().states, kind)
	out := []store.FlowState{}
	var (
		cfg, breaker []byte
		f            flowRow
		running      int64
		now          time.Time
		openParts    int
	)
	_, err := pgx.ForEachRow(rows, []any{&cfg, &f.declaredBy, &f.declaredAt, &breaker, &f.tat, &running, &now, &openParts}, func() error {
		f.cfg, f.breaker = store.FlowConfig{}, store.BreakerStatus{}
		if err := f.decode(cfg, breaker); err != nil {
			return err
		}
		st := flowStateOf(&f, running, now)
		st.PartitionBreakersOpen = openParts
		out = append(out, st)
		return nil
	})
	return out, err
}

// flowStateOf builds a kind's FlowState.
func flowStateOf(f *flowRow, running int64, now time.Time) store.FlowState {
	return store.NewFlowState(f.cfg, f.declaredBy, f.declaredAt, f.breaker, tatOf(f.tat), running, now)
}

// SetBreaker opens (for the kind's CoolDown) or closes the kind's breaker
// by hand, as store.FlowStore documents, under the kind's lock. A kind
// without a breaker fails with an error wrapping store.ErrNotFound, a kind
// that is not a storable text with store.ErrInvalidParams. Closing
// notifies listeners of the kind.
func (s *Store) SetBreaker(ctx context.Context, kind string, open bool) (*store.SetBreakerResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckBreakerKind(kind, open); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	q := s.flowQ()
	res := &store.SetBreakerResult{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			f            flowRow
			cfg, breaker []byte
		)
		err := tx.QueryRow(ctx, q.lockOne, kind).Scan(&cfg, &breaker, &f.tat)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: the kind has no circuit breaker", store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := f.decode(cfg, breaker); err != nil {
			return err
		}
		if f.cfg.Breaker.IsZero() {
			return fmt.Errorf("%w: the kind has no circuit breaker", store.ErrNotFound)
		}
		now, err := clockAfterLock(ctx, tx)
		if err != nil {
			return err
		}
		res.Transition = f.breaker.Set(&f.cfg.Breaker, kind, open, now)
		if res.Transition != nil {
			if err := writeBreaker(ctx, tx, q, kind, &f.breaker); err != nil {
				return err
			}
			// Verdicts recorded in callers' transactions and not yet
			// folded came before the decision by hand: discarded.
			if _, err := tx.Exec(ctx, q.clearVerdicts, []int64{}, kind); err != nil {
				return fmt.Errorf("discard breaker verdicts: %w", err)
			}
			if !open {
				if _, err := tx.Exec(ctx, q.notifyKinds, s.channel, []string{kind}); err != nil {
					return err
				}
			}
		}
		states, err := s.readFlows(ctx, tx, kind)
		if err != nil {
			return err
		}
		if len(states) == 1 {
			res.State = states[0]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: set breaker: %w", err) // the caller names the kind and verb (Admin.SetBreaker)
	}
	return res, nil
}

// clockAfterLock returns the database's clock once the locks taken so far
// are held. Flow decisions use it rather than now() (the transaction's
// start): a transaction that waited for a kind's lock must not apply a
// time earlier than the one its predecessor wrote.
func clockAfterLock(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read clock: %w", err)
	}
	return now, nil
}

// writeBreaker stores a kind's breaker status.
func writeBreaker(ctx context.Context, tx pgx.Tx, q *flowQueries, kind string, b *store.BreakerStatus) error {
	raw, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q.setBreaker, kind, raw); err != nil {
		return fmt.Errorf("store breaker: %w", err)
	}
	return nil
}

// flowRescued tells listeners of the kinds with a concurrency limit or a
// breaker whose running jobs RescueExpired took back: their slots (or
// probe) are free, whatever state the jobs went to (the rescue itself
// announces only jobs that became claimable). It is best effort, after the
// rescue committed: a lost notification only delays hosts until their
// next poll.
func (s *Store) flowRescued(ctx context.Context, rescued []store.Rescued) {
	if len(rescued) == 0 {
		return
	}
	snap, err := s.flowKinds(ctx)
	if err != nil {
		return
	}
	var kinds []string
	for _, r := range rescued {
		if cfg := snap.kinds[r.Kind]; cfg != nil && cfg.Limits() && !slices.Contains(kinds, r.Kind) {
			kinds = append(kinds, r.Kind)
		}
	}
	if len(kinds) > 0 {
		_, _ = s.pool.Exec(ctx, s.flowQ().notifyKinds, s.channel, kinds)
	}
}
