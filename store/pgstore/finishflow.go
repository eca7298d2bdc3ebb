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
// applies them (lease-guarded, a lease listed twice applied once), in one
// statement, and their outcomes fed to their kinds' breakers in the
// call's order. Listeners are told of kinds with a concurrency limit or a
// breaker whose jobs left running, so that hosts waiting for a slot or a
// probe claim again. Invalid rows fail the call with an error wrapping
// store.ErrInvalidParams.
//
// Most outcomes change no breaker (a success while it is closed with no
// failure counted, anything while it is open), so the statement also
// returns the breakers of the kinds it touched as its snapshot saw them,
// and such a finish is done in that one round trip, without taking the
// kinds' rows or queueing behind claims: its outcomes change nothing in a
// state that was the committed one, so they are ordered right there.
// Otherwise a second transaction locks the kinds' rows (kind order, as
// claims), reads them again and applies the outcomes to what they hold
// then; a crash between the two loses those observations, never an
// outcome.
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
	for kind, cfg := range snap.kinds {
		if cfg.Limits() {
			limited = append(limited, kind)
		}
	}
	verdicts, seen, err := s.finishRows(ctx, s.pool, params, limited, res.OK)
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: %w", invalidData(err))
	}
	if !changesBreakers(seen, verdicts) {
		return res, nil
	}
	kinds := make([]string, 0, len(seen))
	for kind := range seen {
		kinds = append(kinds, kind)
	}
	q := s.flowQ()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := readBreakers(ctx, tx, q.lockBreakers, kinds)
		if err != nil {
			return err
		}
		now, err := clockAfterLock(ctx, tx)
		if err != nil {
			return err
		}
		changed := map[string]bool{}
		for _, v := range verdicts {
			f := rows[v.kind]
			if f == nil {
				continue
			}
			changed[v.kind] = true
			if t := f.breaker.Observe(&f.cfg.Breaker, v.kind, v.failed, now); t != nil {
				res.Breakers = append(res.Breakers, *t)
			}
		}
		for kind := range changed {
			if err := writeBreaker(ctx, tx, q, kind, &rows[kind].breaker); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: feed breakers: %w", err)
	}
	return res, nil
}

// verdict is an applied Finish row that counts for its kind's breaker.
type verdict struct {
	kind   string
	failed bool
}

// changesBreakers reports whether feeding verdicts, in order, to the
// breakers in rows would change any of them.
func changesBreakers(rows map[string]*flowRow, verdicts []verdict) bool {
	for _, v := range verdicts {
		f := rows[v.kind]
		if f == nil {
			continue
		}
		b := &f.breaker
		switch {
		case b.State == store.BreakerOpen:
			// Attempts begun before it opened: no verdict.
		case b.Closed() && !v.failed && b.Failures == 0 && f.cfg.Breaker.FailureRatio == 0:
			// A success with no failure in a row counted: nothing to
			// reset.
		default:
			return true
		}
	}
	return false
}

// readBreakers runs sql (breakers or lockBreakers) for kinds.
func readBreakers(ctx context.Context, tx pgx.Tx, sql string, kinds []string) (map[string]*flowRow, error) {
	rows, _ := tx.Query(ctx, sql, kinds)
	out := map[string]*flowRow{}
	var (
		kind         string
		cfg, breaker []byte
		tat          *time.Time
	)
	_, err := pgx.ForEachRow(rows, []any{&kind, &cfg, &breaker, &tat}, func() error {
		f := &flowRow{tat: tat}
		if err := f.decode(cfg, breaker); err != nil {
			return err
		}
		out[kind] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read breakers: %w", err)
	}
	return out, nil
}

// finishRows runs the flow finish statement, sets ok per row, and
// returns the applied rows that are verdicts for a breaker (succeeded,
// retry, dead) in the call's order, and the breakers of their kinds as the
// statement saw them.
func (s *Store) finishRows(ctx context.Context, q querier, params []store.FinishParams, limited []string,
	ok []bool) ([]verdict, map[string]*flowRow, error) {
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
	breakers := map[string]*flowRow{}
	var (
		id, token    *[16]byte
		kind         string
		outcome      *int32
		ord          *int64
		cfg, breaker []byte
		verdicts     []verdict
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &token, &kind, &outcome, &ord, &cfg, &breaker}, func() error {
		if id == nil { // a breaker
			f := &flowRow{}
			if err := f.decode(cfg, breaker); err != nil {
				return err
			}
			breakers[kind] = f
			return nil
		}
		applied[store.Lease{ID: *id, Token: *token}] = true
		switch store.Outcome(*outcome) {
		case store.OutcomeSucceeded:
			verdicts = append(verdicts, verdict{kind, false})
		case store.OutcomeRetry, store.OutcomeDead:
			verdicts = append(verdicts, verdict{kind, true})
		}
		// Snoozes, hand-backs and cancellations are no verdict.
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for i, p := range params {
		// A lease listed twice is applied once: report the first.
		ok[i] = applied[p.Lease]
		applied[p.Lease] = false
	}
	return verdicts, breakers, nil
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
