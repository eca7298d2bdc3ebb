package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
)

// FinishFlow is Finish, also reporting the breaker transitions the
// outcomes made, as store.FlowStore documents. Rows are applied as Finish
// applies them (lease-guarded, a lease listed twice applied once), in one
// statement, and their outcomes fed to their kinds' breakers in the
// call's order, in the same transaction: a claim never sees a failed
// attempt's end (or a probe's) without its verdict. Listeners are told of
// kinds with a concurrency limit or a breaker whose jobs left running, so
// that hosts waiting for a slot or a probe claim again. Invalid rows fail
// the call with an error wrapping store.ErrInvalidParams.
//
// Without breakers it is that one statement. With breakers, most
// outcomes still change none (a success while the breaker is closed with
// no failure counted, anything while it is open): the statement, in a
// transaction, also returns the breakers of the kinds it touched as it
// saw them, and when the outcomes change nothing COMMIT follows, without
// taking the kinds' rows or queueing behind claims (the outcomes change
// nothing in a state that was the committed one, so they are ordered
// right there). Otherwise the transaction locks the kinds' rows (kind
// order, as claims), reads them again, applies the outcomes to what they
// hold then and commits.
func (s *Store) FinishFlow(ctx context.Context, params []store.FinishParams) (*store.FinishResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: finish row %d: %w", i, err)
		}
	}
	if len(params) == 0 {
		return &store.FinishResult{OK: []bool{}}, nil
	}
	res, err := s.finishFlow(ctx, params)
	if _, inTx := ctx.Value(connKey{}).(pgx.Tx); err != nil && !inTx && s.isNoPartition(err) {
		res, err = s.finishFlow(ctx, params) // nothing applied: again, with the partitions checked
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: %w", invalidData(err))
	}
	return res, nil
}

// finishFlow is FinishFlow once, for valid params.
func (s *Store) finishFlow(ctx context.Context, params []store.FinishParams) (*store.FinishResult, error) {
	res := &store.FinishResult{OK: make([]bool, len(params))}
	snap, err := s.flowKinds(ctx)
	if err != nil {
		return nil, err
	}
	var limited []string
	breakers := false
	for kind, cfg := range snap.kinds {
		if cfg.Limits() {
			limited = append(limited, kind)
		}
		breakers = breakers || !cfg.Breaker.IsZero() || !cfg.PartitionBreaker.IsZero()
	}
	callerTx, inTx := ctx.Value(connKey{}).(pgx.Tx)
	if inTx || anyRich(params) {
		// Inside a caller's transaction (CompleteTx, a Finish with
		// results), or with results and Then jobs to write: everything
		// goes in one transaction, the caller's when there is one, so
		// that nothing commits before the caller does. In a user's
		// transaction (CompleteTx), verdicts are recorded, not fed: see
		// recordVerdicts.
		deferred := ctx.Value(userTxKey{}) != nil
		run := func(tx pgx.Tx) error { return s.finishFlowIn(ctx, tx, params, limited, deferred, res) }
		if inTx {
			err = run(callerTx)
		} else {
			err = pgx.BeginFunc(ctx, s.pool, run)
		}
		return res, err
	}
	if !breakers {
		_, _, err := s.finishRows(ctx, s.pool, params, limited, res.OK)
		return res, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer releaseConn(conn)
	return res, s.finishFeeding(ctx, conn.Conn(), params, limited, res)
}

// finishFeeding runs FinishFlow's transaction on conn.
func (s *Store) finishFeeding(ctx context.Context, conn *pgx.Conn, params []store.FinishParams, limited []string, res *store.FinishResult) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op once committed
	verdicts, seen, err := s.finishRows(ctx, tx, params, limited, res.OK)
	if err != nil {
		return err
	}
	if changesBreakers(seen, verdicts) {
		kinds := make([]string, 0, len(seen))
		for kind := range seen {
			kinds = append(kinds, kind)
		}
		if err := s.feedBreakers(ctx, tx, kinds, verdicts, res); err != nil {
			return fmt.Errorf("feed breakers: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// finishFlowIn applies params on tx: the outcomes, then the results and
// Then jobs of the rows that applied (followup.go), then the breakers'
// verdicts, so a claim never sees an attempt's end without its breaker
// update. It does not commit.
func (s *Store) finishFlowIn(ctx context.Context, tx pgx.Tx, params []store.FinishParams, limited []string,
	deferred bool, res *store.FinishResult) error {
	verdicts, seen, err := s.finishRows(ctx, tx, params, limited, res.OK)
	if err != nil {
		return err
	}
	if anyRich(params) {
		if err := s.finishExtras(ctx, tx, params, res.OK); err != nil {
			return err
		}
	}
	if deferred {
		return s.recordVerdicts(ctx, tx, seen, verdicts)
	}
	if changesBreakers(seen, verdicts) {
		kinds := make([]string, 0, len(seen))
		for kind := range seen {
			kinds = append(kinds, kind)
		}
		if err := s.feedBreakers(ctx, tx, kinds, verdicts, res); err != nil {
			return fmt.Errorf("feed breakers: %w", err)
		}
	}
	return nil
}

// userTxKey marks a context whose connKey transaction is a user's
// (CompleteTx), which may stay open long after the call.
type userTxKey struct{}

// recordVerdicts appends, in a user's transaction, the verdicts that
// change their kinds' breakers to flow_breaker_verdicts instead of
// feeding the breakers: feeding them locks the kinds' flows rows, which
// the user's transaction would hold until it ends, and every claim of
// the kinds, on every host, would wait for it. The verdicts take effect
// when the next claim or breaker-feeding Finish of the kind after the
// commit folds them in (at its clock); a rollback drops them with the
// outcome. A verdict that changes nothing as the statement saw the
// breaker (a success with no failure counted, anything while open) is
// not recorded, as FinishFlow's own fast path: it is ordered there.
func (s *Store) recordVerdicts(ctx context.Context, tx pgx.Tx, seen map[string]*flowRow, verdicts []verdict) error {
	var (
		kinds  []string
		failed []bool
	)
	for _, v := range verdicts {
		if changesKindBreakers(seen, []verdict{v}) {
			kinds, failed = append(kinds, v.kind), append(failed, v.failed)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.flowQ().addVerdicts, kinds, failed); err != nil {
		return fmt.Errorf("record breaker verdicts: %w", err)
	}
	return nil
}

// feedBreakers locks the kinds' flows rows, feeds them verdicts in order
// at the clock read once they are held (after the verdicts callers'
// transactions recorded, which it folds in and deletes), and writes them
// back.
func (s *Store) feedBreakers(ctx context.Context, tx pgx.Tx, kinds []string, verdicts []verdict, res *store.FinishResult) error {
	q := s.flowQ()
	rows, err := readBreakers(ctx, tx, q.lockBreakers, kinds)
	if err != nil {
		return err
	}
	now, err := clockAfterLock(ctx, tx)
	if err != nil {
		return err
	}
	changed := map[string]bool{}
	var seqs []int64
	for kind, f := range rows {
		if len(f.seqs) > 0 {
			res.Breakers = append(res.Breakers, f.fold(kind, now)...)
			seqs = append(seqs, f.seqs...)
			changed[kind] = true
		}
	}
	if len(seqs) > 0 {
		if _, err := tx.Exec(ctx, q.clearVerdicts, seqs, ""); err != nil {
			return fmt.Errorf("delete folded verdicts: %w", err)
		}
	}
	for _, v := range verdicts {
		f := rows[v.kind]
		if f == nil || f.cfg.Breaker.IsZero() {
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
	return s.feedPartBreakers(ctx, tx, rows, verdicts, now, res)
}

// releaseConn rolls back a transaction an error left open on conn, then
// returns it to the pool (which would otherwise destroy it).
func releaseConn(conn *pgxpool.Conn) {
	if c := conn.Conn(); !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = c.Exec(ctx, "ROLLBACK")
		cancel()
	}
	conn.Release()
}

// verdict is an applied Finish row that counts for its kind's breaker
// and its partition's (key).
type verdict struct {
	kind, key string
	failed    bool
}

// changesBreakers reports whether feeding verdicts, in order, to the
// breakers in rows (the kinds', and their partitions') would change any
// of them.
func changesBreakers(rows map[string]*flowRow, verdicts []verdict) bool {
	return changesKindBreakers(rows, verdicts) || changesPartBreakers(rows, verdicts)
}

// changesKindBreakers reports whether feeding verdicts, in order, to the
// kinds' breakers in rows would change any of them.
func changesKindBreakers(rows map[string]*flowRow, verdicts []verdict) bool {
	for _, v := range verdicts {
		f := rows[v.kind]
		if f == nil {
			continue
		}
		b := &f.breaker
		switch {
		case f.hasVerdicts:
			// Verdicts recorded in callers' transactions come first.
			return true
		case f.cfg.Breaker.IsZero():
			// Only a partition breaker.
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
func readBreakers(ctx context.Context, q querier, sql string, kinds []string) (map[string]*flowRow, error) {
	rows, _ := q.Query(ctx, sql, kinds)
	out := map[string]*flowRow{}
	var (
		kind         string
		cfg, breaker []byte
		tat          *time.Time
		verdicts     []bool
		seqs         []int64
	)
	_, err := pgx.ForEachRow(rows, []any{&kind, &cfg, &breaker, &tat, &verdicts, &seqs}, func() error {
		f := &flowRow{tat: tat, verdicts: verdicts, seqs: seqs}
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
	a := newFinishArrays(params)
	if limited == nil {
		limited = []string{}
	}
	// FinishParams.Result and Then are not this statement's: FinishFlow
	// writes them afterwards in the same transaction (finishExtras).
	// Without JIT (jitOffSQL), in one round trip: on the pool, the two
	// statements share the batch's implicit transaction.
	// Jobs that end leave jobs in the statement (finishmove.go), unless
	// results follow them.
	lo, hi := s.finishWindow(ctx)
	if anyRich(params) {
		lo, hi = nil, nil
	}
	settings := jitOffSQL + s.endSettings(ctx) // generic plans, and WithAsyncClaimsAndOutcomes
	b := &pgx.Batch{}
	b.Queue(settings)
	b.Queue(s.flowQ().finish, a.ids, a.tokens, a.outcomes, a.delays, a.errs, s.channel, limited, lo, hi)
	br := q.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, fmt.Errorf("settings: %w", err)
	}
	rows, _ := br.Query()
	applied := make(map[store.Lease]bool, len(params))
	breakers := map[string]*flowRow{}
	var (
		id, token    *[16]byte
		kind         string
		outcome      *int32
		ord          *int64
		cfg, breaker []byte
		pending      *bool
		key          *string
		verdicts     []verdict
		partKeys     [][2]string
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &token, &kind, &outcome, &ord, &cfg, &breaker, &pending, &key}, func() error {
		if id == nil && key != nil { // a partition's breaker
			partKeys = append(partKeys, [2]string{kind, *key})
			return nil
		}
		if id == nil { // a breaker
			f := &flowRow{hasVerdicts: pending != nil && *pending}
			if err := f.decode(cfg, breaker); err != nil {
				return err
			}
			breakers[kind] = f
			return nil
		}
		applied[store.Lease{ID: *id, Token: *token}] = true
		switch store.Outcome(*outcome) {
		case store.OutcomeSucceeded:
			verdicts = append(verdicts, verdict{kind, *key, false})
		case store.OutcomeRetry, store.OutcomeDead:
			verdicts = append(verdicts, verdict{kind, *key, true})
		}
		// Snoozes, hand-backs and cancellations are no verdict.
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if err := br.Close(); err != nil {
		return nil, nil, err
	}
	for _, pk := range partKeys {
		if f := breakers[pk[0]]; f != nil {
			if f.partKeys == nil {
				f.partKeys = map[string]bool{}
			}
			f.partKeys[pk[1]] = true
		}
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
