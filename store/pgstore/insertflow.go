package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// flowInserts reports whether an insert must take the flow path: a row has
// a sequence key or a PendingLimit, or its kind has a partition source or
// a MaxPending.
func (s *Store) flowInserts(ctx context.Context, params []store.InsertParams) bool {
	var snap flowSnapshot
	for i := range params {
		p := &params[i]
		if p.SequenceKey != "" || p.PendingLimit > 0 {
			return true
		}
		if snap.kinds == nil {
			var err error
			if snap, err = s.flowKinds(ctx); err != nil {
				return true // the flow path reports it
			}
		}
		if cfg := snap.kinds[p.Kind]; cfg != nil && (!cfg.Partition.IsZero() || cfg.MaxPending > 0) {
			return true
		}
	}
	return false
}

// insertFlow is Insert (tx nil: in its own transaction) or InsertTx for
// rows under flow control: it checks the pending bounds, inserts through
// the plain path in the same transaction, then gives the inserted rows
// their partition and sequence keys and counts them. A kind's MaxPending
// is checked against its counter while its flows row is locked (kind
// order), so racing producers of one kind take turns and never overshoot;
// a row's PendingLimit counts all pending jobs up to the bound, without a
// lock, so racing producers may overshoot by their rows in flight.
func (s *Store) insertFlow(ctx context.Context, tx pgx.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	if tx != nil {
		return s.insertFlowTx(ctx, tx, params)
	}
	var res []store.InsertResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.insertFlowTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Store) insertFlowTx(ctx context.Context, tx pgx.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	snap, err := s.flowKinds(withConn(ctx, tx)) // on tx: no second connection while tx holds one
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert: %w", err)
	}
	q := s.flowQ()
	if err := s.checkPending(ctx, tx, q, snap, params); err != nil {
		return nil, fmt.Errorf("pgstore: insert: %w", err)
	}
	pkeys := make([]string, len(params))
	for i := range params {
		p := &params[i]
		if cfg := snap.kinds[p.Kind]; cfg != nil && !cfg.Partition.IsZero() {
			if pkeys[i], err = store.PartitionKeyOf(cfg.Partition, p.Metadata, p.Payload); err != nil {
				return nil, fmt.Errorf("pgstore: insert job %d: %w", i, err)
			}
		}
	}
	var res []store.InsertResult
	if len(params) == 1 {
		r, err := s.insertOne(ctx, tx, &params[0])
		if err != nil {
			return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
		}
		res = []store.InsertResult{r}
	} else if res, err = s.insertMany(ctx, tx, params); err != nil {
		return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
	}
	var (
		ids      []uuid.UUID
		pk, sk   []string
		counted  []bool
		seqKinds []string
	)
	for i := range params {
		p := &params[i]
		cfg := snap.kinds[p.Kind]
		count := cfg != nil && cfg.MaxPending > 0
		if res[i].Duplicate || (pkeys[i] == "" && p.SequenceKey == "" && !count) {
			continue
		}
		ids, pk, sk, counted = append(ids, p.ID), append(pk, pkeys[i]), append(sk, p.SequenceKey), append(counted, count)
		if p.SequenceKey != "" && !snap.seqKinds[p.Kind] && !slices.Contains(seqKinds, p.Kind) {
			seqKinds = append(seqKinds, p.Kind)
		}
	}
	if len(ids) == 0 {
		return res, nil
	}
	rows, _ := tx.Query(ctx, q.setKeys, ids, pk, sk, counted)
	added := map[string]int64{}
	var (
		kind string
		n    int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&kind, &n}, func() error {
		added[kind] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pgstore: insert: set flow keys: %w", invalidData(err))
	}
	for kind, n := range added {
		if _, err := tx.Exec(ctx, q.addPending, kind, n); err != nil {
			return nil, fmt.Errorf("pgstore: insert: count pending jobs of %q: %w", kind, err)
		}
	}
	if len(seqKinds) > 0 {
		if _, err := tx.Exec(ctx, q.addSeqKinds, seqKinds); err != nil {
			return nil, fmt.Errorf("pgstore: insert: record kinds with sequences: %w", err)
		}
		// Claims from this Store take the flow way for them at once;
		// other Stores learn within flowCacheTTL (the sequence guard
		// covers the meantime).
		s.forgetFlows()
	}
	return res, nil
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
