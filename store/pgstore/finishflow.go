package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// FinishFlow is Finish, also reporting the breaker transitions the
// outcomes made, as store.FlowStore documents. Rows are applied as Finish
// applies them (lease-guarded, a lease listed twice applied once). When
// jobs of kinds with a breaker are among them, it runs in one transaction
// that first locks those kinds' flows rows (in kind order, as claims do),
// then feeds each applied row's outcome to its kind's breaker in the
// call's order and writes the breakers back; otherwise it is one
// statement. Listeners are told of kinds with a concurrency limit or a
// breaker whose jobs left running, so that hosts waiting for a slot or a
// probe claim again. Invalid rows fail the call with an error wrapping
// store.ErrInvalidParams.
func (s *Store) FinishFlow(ctx context.Context, params []store.FinishParams) (*store.FinishResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: finish row %d: %w", i, err)
		}
	}
	res := &store.FinishResult{OK: make([]bool, len(params))}
	if len(params) == 0 {
		return res, nil
	}
	snap, err := s.flowKinds(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: %w", err)
	}
	var limited []string
	breakers := false
	for kind, cfg := range snap.kinds {
		if cfg.Limits() {
			limited = append(limited, kind)
		}
		breakers = breakers || !cfg.Breaker.IsZero()
	}
	if !breakers {
		if err := s.finishRows(ctx, s.pool, params, limited, res.OK, nil); err != nil {
			return nil, fmt.Errorf("pgstore: finish: %w", invalidData(err))
		}
		return res, nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		locked, now, err := s.lockBreakers(ctx, tx, params)
		if err != nil {
			return err
		}
		changed := map[string]bool{}
		observe := func(kind string, out store.Outcome) {
			f := locked[kind]
			if f == nil || f.cfg.Breaker.IsZero() {
				return
			}
			var t *store.BreakerTransition
			switch out {
			case store.OutcomeSucceeded:
				t = f.breaker.Observe(&f.cfg.Breaker, kind, false, now)
			case store.OutcomeRetry, store.OutcomeDead:
				t = f.breaker.Observe(&f.cfg.Breaker, kind, true, now)
			default:
				return // snoozes, hand-backs and cancellations are no verdict
			}
			changed[kind] = true
			if t != nil {
				res.Breakers = append(res.Breakers, *t)
			}
		}
		if err := s.finishRows(ctx, tx, params, limited, res.OK, observe); err != nil {
			return err
		}
		for kind := range changed {
			if err := writeBreaker(ctx, tx, s.flowQ(), kind, &locked[kind].breaker); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: %w", invalidData(err))
	}
	return res, nil
}

// lockBreakers locks the flows rows of the kinds with a breaker among the
// jobs of params, and returns them and the clock read once they are held.
func (s *Store) lockBreakers(ctx context.Context, tx pgx.Tx, params []store.FinishParams) (map[string]*flowRow, time.Time, error) {
	ids := make([][16]byte, len(params))
	for i, p := range params {
		ids[i] = p.Lease.ID
	}
	b := &pgx.Batch{}
	b.Queue(s.flowQ().lockBreakers, ids)
	b.Queue(`SELECT clock_timestamp()`)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock breakers: %w", err)
	}
	locked := map[string]*flowRow{}
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
		locked[kind] = f
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock breakers: %w", err)
	}
	var now time.Time
	if err := br.QueryRow().Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("read clock: %w", err)
	}
	return locked, now, br.Close()
}

// finishRows runs the flow finish statement, sets ok per row and, when
// observe is not nil, calls it for each applied row in the call's order.
func (s *Store) finishRows(ctx context.Context, q querier, params []store.FinishParams, limited []string,
	ok []bool, observe func(kind string, out store.Outcome)) error {
	n := len(params)
	ids := make([][16]byte, n)
	tokens := make([][16]byte, n)
	outcomes := make([]int32, n)
	delays := make([]int64, n)
	errs := make([]string, n)
	for i, p := range params {
		ids[i], tokens[i], outcomes[i], errs[i] = p.Lease.ID, p.Lease.Token, int32(p.Outcome), p.Error
		if p.Outcome == store.OutcomeRetry || p.Outcome == store.OutcomeSnooze {
			delays[i] = micros(p.Delay)
		}
	}
	if limited == nil {
		limited = []string{}
	}
	rows, _ := q.Query(ctx, s.flowQ().finish, ids, tokens, outcomes, delays, errs, s.channel, limited)
	applied := make(map[store.Lease]bool, n)
	var (
		l       store.Lease
		kind    string
		outcome int32
	)
	_, err := pgx.ForEachRow(rows, []any{&l.ID, &l.Token, &kind, &outcome}, func() error {
		applied[l] = true
		if observe != nil {
			observe(kind, store.Outcome(outcome))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, p := range params {
		// A lease listed twice is applied once: report the first.
		ok[i] = applied[p.Lease]
		applied[p.Lease] = false
	}
	return nil
}

// finishThroughFlow is Finish of a Store with flow-controlled kinds: the
// breakers are fed and freed slots announced, as FinishFlow does.
func (s *Store) finishThroughFlow(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	res, err := s.FinishFlow(ctx, params)
	if err != nil {
		return nil, err
	}
	return res.OK, nil
}
