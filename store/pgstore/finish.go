package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Finish records attempt outcomes as store.Store requires, in one statement
// whatever the number of params: each row is applied only while the job is
// running under the given lease token, so of two leases of one job in the
// same call (a zombie's and the current holder's) only the current one
// applies, and a lease listed twice is applied once, for its first row.
// Every row is checked with FinishParams.Validate before anything is sent;
// a bad row, or one PostgreSQL refuses as data, fails the whole call with
// an error wrapping store.ErrInvalidParams. Jobs that become claimable again
// (retry, snooze, release) notify listeners, one notification per kind, so
// a near-term retry wakes the hosts that can run it; jobs paused instead
// (their pause was requested) do not. A row another transaction holds (a
// handler returned with its CompleteTx transaction still open) does not
// hold back the others: they are written first, then that row alone waits
// for the lock and applies, or not, by what the transaction did. A batch
// child's end still waits for its batch's row while a sibling's
// CompleteTx holds it (see CompleteTx).
func (s *Store) Finish(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if anyRich(params) {
		return s.finishRich(ctx, params) // results, Then jobs: followup.go
	}
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: finish row %d: %w", i, err)
		}
	}
	if len(params) > 0 && s.flowFinishes(ctx) { // breakers and freed slots: finishflow.go
		return s.finishThroughFlow(ctx, params)
	}
	n := len(params)
	ok := make([]bool, n)
	if n == 0 {
		return ok, nil
	}
	a := newFinishArrays(params)
	applied := make(map[store.Lease]bool, n)
	var wait []store.FinishParams
	_, inTx := ctx.Value(connKey{}).(pgx.Tx)
	for try := 0; ; try++ {
		// A failed statement may have sent rows before its error (the
		// history insert runs last): count only the attempt that ends.
		clear(applied)
		wait = wait[:0]
		lo, hi := s.finishWindow(ctx)
		rows, done := s.queryEnd(ctx, s.conn(ctx), s.q.finish, a.ids, a.tokens, a.outcomes, a.delays, a.errs, s.channel, lo, hi)
		var err error
		wait, err = scanFinished(rows, applied, wait)
		err = done(err)
		if err != nil && try == 0 && !inTx && s.isNoPartition(err) {
			continue // nothing applied: again, with the partitions checked
		}
		if err != nil {
			return nil, fmt.Errorf("pgstore: finish: %w", invalidData(err))
		}
		break
	}
	if len(wait) > 0 {
		// Rows another transaction holds: the others are written (and,
		// outside a caller's transaction, committed); only these wait.
		if err := s.finishBusy(ctx, params, wait, applied); err != nil {
			return nil, err
		}
	}
	reportApplied(ok, params, applied)
	return ok, nil
}

// scanFinished reads the rows of the finish statement: the leases it
// applied go to applied, those another transaction holds are appended to
// wait (as FinishParams holding only the lease), which it returns.
func scanFinished(rows pgx.Rows, applied map[store.Lease]bool, wait []store.FinishParams) ([]store.FinishParams, error) {
	var (
		l    store.Lease
		busy bool
	)
	_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&l.ID), (*[16]byte)(&l.Token), &busy}, func() error {
		if busy {
			wait = append(wait, store.FinishParams{Lease: l})
		} else {
			applied[l] = true
		}
		return nil
	})
	return wait, err
}

// reportApplied sets ok[i] to whether params[i] applied. A lease listed
// twice is applied once: the first row reports it.
func reportApplied(ok []bool, params []store.FinishParams, applied map[store.Lease]bool) {
	for i, p := range params {
		ok[i] = applied[p.Lease]
		applied[p.Lease] = false
	}
}

// finishBusy writes, waiting for their row locks, the outcomes of the
// leases in busy (the first row of each in params), and marks those that
// applied.
func (s *Store) finishBusy(ctx context.Context, params, busy []store.FinishParams, applied map[store.Lease]bool) error {
	want := make(map[store.Lease]bool, len(busy))
	for _, b := range busy {
		want[b.Lease] = true
	}
	rest := make([]store.FinishParams, 0, len(busy))
	for _, p := range params {
		if want[p.Lease] {
			rest = append(rest, p)
			want[p.Lease] = false
		}
	}
	a := newFinishArrays(rest)
	rows, done := s.queryEnd(ctx, s.conn(ctx), s.q.finishWait, a.ids, a.tokens, a.outcomes, a.delays, a.errs, s.channel)
	var l store.Lease
	_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&l.ID), (*[16]byte)(&l.Token)}, func() error {
		applied[l] = true
		return nil
	})
	err = done(err)
	if err != nil {
		return fmt.Errorf("pgstore: finish: rows held by another transaction: %w", invalidData(err))
	}
	return nil
}

// ExtendLeases extends every still-held lease in one statement, as
// store.Store requires. Leases are matched on (job, token), so a stale and
// a current lease of the same job are told apart: the stale one is
// reported lost and the current one extended. It never waits on a row
// lock: a held lease whose job another transaction has locked (a handler's
// CompleteTx not yet committed) is skipped, reported neither lost nor
// finished, and extended by a later call once the lock is gone. A lease
// whose own outcome ended the job (Finish or a committed CompleteTx with
// its token) is reported in both Lost and Finished.
//
// It never waits for the pool either: the statement runs on the Store's
// own connection (leaseconn.go), so handlers holding every pool
// connection cannot starve the heartbeat of the leases they run under.
// Concurrent calls take turns on it.
func (s *Store) ExtendLeases(ctx context.Context, params *store.ExtendParams) (*store.ExtendResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if params == nil || params.Duration <= 0 {
		return nil, fmt.Errorf("pgstore: extend leases: duration must be > 0: %w", store.ErrInvalidParams)
	}
	res, err := s.extendParts(ctx, []extendPart{{sql: s.q.extend, leases: params.Leases}}, params.Duration)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// extendPart is one extend statement and the leases it extends: the whole
// schema's on PostgreSQL, one shard's each on Citus.
type extendPart struct {
	sql    string
	leases []store.Lease
}

// extendParts runs the extend statements of parts on the Store's lease
// connection, in turns, and reports as ExtendLeases does.
func (s *Store) extendParts(ctx context.Context, parts []extendPart, d time.Duration) (*store.ExtendResult, error) {
	res := &store.ExtendResult{}
	const (
		extended = iota // the extend statement's kinds
		busy
		finished
	)
	var found map[store.Lease]int32
	err := s.onLeaseConn(ctx, func(q querier) error {
		// Runs again when the lease connection died unseen: start afresh.
		found = make(map[store.Lease]int32)
		res.CancelRequested = res.CancelRequested[:0]
		for _, p := range parts {
			if len(p.leases) == 0 {
				continue
			}
			ids := make([][16]byte, len(p.leases))
			tokens := make([][16]byte, len(p.leases))
			for i, l := range p.leases {
				ids[i], tokens[i] = l.ID, l.Token
			}
			rows, _ := q.Query(ctx, p.sql, ids, tokens, micros(d))
			var (
				l      store.Lease
				cancel bool
				kind   int32
			)
			_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&l.ID), (*[16]byte)(&l.Token), &cancel, &kind}, func() error {
				found[l] = kind
				if cancel && kind != finished {
					res.CancelRequested = append(res.CancelRequested, l)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: extend leases: %w", err)
	}
	for _, p := range parts {
		for _, l := range p.leases {
			k, ok := found[l]
			switch {
			case !ok:
				res.Lost = append(res.Lost, l)
			case k == finished:
				res.Lost = append(res.Lost, l)
				res.Finished = append(res.Finished, l)
			}
		}
	}
	return res, nil
}

// finishArrays are a Finish call's rows as the parallel arrays the finish
// statements unnest. The IDs and tokens are raw [16]byte arrays: pgx
// encodes them directly, where []uuid.UUID goes through a failing plan per
// element first.
type finishArrays struct {
	ids, tokens [][16]byte
	outcomes    []int32
	delays      []int64 // microseconds; retries and snoozes only
	errs        []string
}

func newFinishArrays(params []store.FinishParams) finishArrays {
	n := len(params)
	a := finishArrays{ids: make([][16]byte, n), tokens: make([][16]byte, n), outcomes: make([]int32, n),
		delays: make([]int64, n), errs: make([]string, n)}
	for i, p := range params {
		a.ids[i], a.tokens[i], a.outcomes[i], a.errs[i] = p.Lease.ID, p.Lease.Token, int32(p.Outcome), p.Error
		if p.Outcome == store.OutcomeRetry || p.Outcome == store.OutcomeSnooze {
			a.delays[i] = micros(p.Delay)
		}
	}
	return a
}
