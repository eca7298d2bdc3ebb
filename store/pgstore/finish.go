package pgstore

import (
	"context"
	"fmt"

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
// (their pause was requested) do not.
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
	rows, _ := s.conn(ctx).Query(ctx, s.q.finish, a.ids, a.tokens, a.outcomes, a.delays, a.errs, s.channel)
	applied := make(map[store.Lease]bool, n)
	var l store.Lease
	_, err := pgx.ForEachRow(rows, []any{&l.ID, &l.Token}, func() error {
		applied[l] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: %w", invalidData(err))
	}
	for i, p := range params {
		// A lease listed twice is applied once: report the first.
		ok[i] = applied[p.Lease]
		applied[p.Lease] = false
	}
	return ok, nil
}

// ExtendLeases extends every still-held lease in one statement, as
// store.Store requires. Leases are matched on (job, token), so a stale and
// a current lease of the same job are told apart: the stale one is
// reported lost and the current one extended.
func (s *Store) ExtendLeases(ctx context.Context, params *store.ExtendParams) (*store.ExtendResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if params == nil || params.Duration <= 0 {
		return nil, fmt.Errorf("pgstore: extend leases: duration must be > 0: %w", store.ErrInvalidParams)
	}
	res := &store.ExtendResult{}
	if len(params.Leases) == 0 {
		return res, nil
	}
	ids := make([][16]byte, len(params.Leases))
	tokens := make([][16]byte, len(params.Leases))
	for i, l := range params.Leases {
		ids[i], tokens[i] = l.ID, l.Token
	}
	rows, _ := s.pool.Query(ctx, s.q.extend, ids, tokens, micros(params.Duration))
	held := make(map[store.Lease]bool, len(ids))
	var (
		l      store.Lease
		cancel bool
	)
	_, err := pgx.ForEachRow(rows, []any{&l.ID, &l.Token, &cancel}, func() error {
		held[l] = true
		if cancel {
			res.CancelRequested = append(res.CancelRequested, l)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: extend leases: %w", err)
	}
	for _, l := range params.Leases {
		if !held[l] {
			res.Lost = append(res.Lost, l)
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
