package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// flowInserts reports whether rows of an insert need the flow steps
// around it (insertRows): a row has a sequence key or a PendingLimit, or
// its kind a MaxPending. A partition source alone does not: the insert
// writes partition keys itself (partitionKeys). The kinds' settings are
// read on the connection ctx carries (withConn).
func (s *Store) flowInserts(ctx context.Context, params []store.InsertParams) (bool, error) {
	var snap flowSnapshot
	for i := range params {
		p := &params[i]
		if p.SequenceKey != "" || p.PendingLimit > 0 {
			return true, nil
		}
		if snap.kinds == nil {
			var err error
			if snap, err = s.flowKinds(ctx); err != nil {
				return false, err
			}
		}
		if cfg := snap.kinds[p.Kind]; cfg != nil && cfg.MaxPending > 0 {
			return true, nil
		}
	}
	return false, nil
}

// insertRows writes validated rows on tx, the caller's or one of Insert's
// own. Every insert of jobs made from InsertParams goes through it (Insert
// beyond its one-row fast path, InsertTx, InsertBatch's children), so that
// none can skip a step:
//
//  1. the pending bounds (checkPending), for rows of a kind with a
//     MaxPending or with a PendingLimit;
//  2. the rows, with their partition keys (insertOne, insertMany);
//  3. the sequence keys and pending counts of the rows inserted;
//  4. the follow-up templates of the rows inserted (attachFollowUps).
//
// A kind's MaxPending is checked against its counter while its flows row
// is locked (kind order), so racing producers of one kind take turns and
// never overshoot; a row's PendingLimit counts all pending jobs up to the
// bound, without a lock, so racing producers may overshoot by their rows
// in flight. Periodic ticks are neither refused nor counted (a tick is due
// whatever the backlog): FirePeriodic inserts through insertTicks, which
// takes every other step. It once took only step 2, and a tick's
// sequence key and follow-ups were lost.
func (s *Store) insertRows(ctx context.Context, tx pgx.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	return s.insertRowsAs(ctx, tx, params, false)
}

// insertTicks is insertRows for periodic ticks' jobs: no pending bound
// refuses them and no pending counter counts them.
func (s *Store) insertTicks(ctx context.Context, tx pgx.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	return s.insertRowsAs(ctx, tx, params, true)
}

// insertRowsAs is insertRows; ticks leaves out the pending bounds and
// counts.
func (s *Store) insertRowsAs(ctx context.Context, tx pgx.Tx, params []store.InsertParams, ticks bool) ([]store.InsertResult, error) {
	ctx = withConn(ctx, tx) // no second connection while tx holds one
	flow, err := s.flowInserts(ctx, params)
	if err != nil {
		return nil, err
	}
	var (
		snap flowSnapshot
		q    *flowQueries
	)
	if flow {
		if snap, err = s.flowKinds(ctx); err != nil {
			return nil, err
		}
		q = s.flowQ()
		if !ticks {
			if err := s.checkPending(ctx, tx, q, snap, params); err != nil {
				return nil, err
			}
		}
	}
	var res []store.InsertResult
	if len(params) == 1 {
		r, err := s.insertOne(ctx, tx, &params[0])
		if err != nil {
			return nil, err
		}
		res = []store.InsertResult{r}
	} else if res, err = s.insertMany(ctx, tx, params); err != nil {
		return nil, err
	}
	if flow {
		if err := s.setFlowKeys(ctx, tx, q, snap, params, res, !ticks); err != nil {
			return nil, err
		}
	}
	if anyFollowUps(params) {
		if err := s.attachFollowUps(ctx, tx, params, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// setFlowKeys gives the inserted rows of params their sequence keys and,
// when countPending, counts those of a kind with a MaxPending in its
// counter.
func (s *Store) setFlowKeys(ctx context.Context, tx pgx.Tx, q *flowQueries, snap flowSnapshot,
	params []store.InsertParams, res []store.InsertResult, countPending bool) error {
	var (
		ids      [][16]byte
		sk       []string
		counted  []bool
		seqKinds []string
	)
	for i := range params {
		p := &params[i]
		cfg := snap.kinds[p.Kind]
		count := countPending && cfg != nil && cfg.MaxPending > 0
		if res[i].Duplicate || (p.SequenceKey == "" && !count) {
			continue
		}
		ids, sk, counted = append(ids, [16]byte(p.ID)), append(sk, p.SequenceKey), append(counted, count)
		if p.SequenceKey != "" && !snap.seqKinds[p.Kind] && !slices.Contains(seqKinds, p.Kind) {
			seqKinds = append(seqKinds, p.Kind)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, _ := tx.Query(ctx, q.setKeys, ids, sk, counted)
	added := map[string]int64{}
	var (
		kind string
		n    int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&kind, &n}, func() error {
		added[kind] = n
		return nil
	}); err != nil {
		return fmt.Errorf("set flow keys: %w", err)
	}
	for kind, n := range added {
		if _, err := tx.Exec(ctx, q.addPending, kind, n); err != nil {
			return fmt.Errorf("count pending jobs of %q: %w", kind, err)
		}
	}
	if len(seqKinds) > 0 {
		if _, err := tx.Exec(ctx, q.addSeqKinds, seqKinds); err != nil {
			return fmt.Errorf("record kinds with sequences: %w", err)
		}
		// Claims from this Store take the flow way for them at once;
		// other Stores learn within flowCacheTTL (the sequence guard
		// covers the meantime).
		s.forgetFlows()
	}
	return nil
}

// checkPending refuses, with a *store.PendingLimitError, an insert that
// would take a kind's pending jobs past its MaxPending or all pending jobs
// past a row's PendingLimit. Every row of the call counts, duplicates too.
func (s *Store) checkPending(ctx context.Context, tx pgx.Tx, q *flowQueries, snap flowSnapshot, params []store.InsertParams) error {
	rows := map[string]int{}
	var kinds []string
	limit := 0
	for i := range params {
		p := &params[i]
		if p.PendingLimit > 0 && (limit == 0 || p.PendingLimit < limit) {
			limit = p.PendingLimit
		}
		if cfg := snap.kinds[p.Kind]; cfg != nil && cfg.MaxPending > 0 {
			if rows[p.Kind] == 0 {
				kinds = append(kinds, p.Kind)
			}
			rows[p.Kind]++
		}
	}
	slices.Sort(kinds) // the lock order
	for _, kind := range kinds {
		// Lock the kind's row and read its settings as they are now.
		var cfg, breaker []byte
		var tat any
		err := tx.QueryRow(ctx, q.lockOne, kind).Scan(&cfg, &breaker, &tat)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the settings were removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("lock flow settings of %q: %w", kind, err)
		}
		f := &flowRow{}
		if err := f.decode(cfg, breaker); err != nil {
			return err
		}
		max := f.cfg.MaxPending
		if max == 0 {
			continue
		}
		var pending int64
		if err := tx.QueryRow(ctx, q.pending, kind).Scan(&pending); err != nil {
			return fmt.Errorf("count pending jobs of %q: %w", kind, err)
		}
		if pending+int64(rows[kind]) > int64(max) {
			return &store.PendingLimitError{Kind: kind, Pending: int(min(pending, int64(max))), Limit: max}
		}
	}
	if limit > 0 {
		var pending int64
		if err := tx.QueryRow(ctx, q.pendingAll, limit).Scan(&pending); err != nil {
			return fmt.Errorf("count pending jobs: %w", err)
		}
		if pending+int64(len(params)) > int64(limit) {
			return &store.PendingLimitError{Pending: int(pending), Limit: limit}
		}
	}
	return nil
}
