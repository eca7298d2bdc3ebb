package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Results, Then jobs and follow-ups. The work a job's end sets off (its
// follow-ups, its batch's counts and completion) is done by the triggers
// of migration 0006 (jobs_state_changed, jobs_flush_batch_ends), whatever
// statement ends the job. What an attempt brings with its outcome (a result, Then jobs) is
// written here, in the transaction that applies the outcome: the outcome
// itself goes through Finish's own statement, run on that transaction, so
// the rules of Finish are written once.

// connKey is the context key of the connection a Store call must use
// instead of the pool: the transaction of a larger operation.
type connKey struct{}

// withConn returns ctx carrying q, for Store calls that are parts of an
// operation running on q.
func withConn(ctx context.Context, q querier) context.Context {
	return context.WithValue(ctx, connKey{}, q)
}

// conn returns the transaction ctx carries (see withConn), or the pool.
func (s *Store) conn(ctx context.Context) querier {
	if q, ok := ctx.Value(connKey{}).(querier); ok {
		return q
	}
	return s.pool
}

// anyRich reports whether a Finish call carries results or Then jobs, which
// need a transaction around the outcome.
func anyRich(params []store.FinishParams) bool {
	for i := range params {
		if params[i].Result != nil || len(params[i].Then) > 0 {
			return true
		}
	}
	return false
}

// anyFollowUps reports whether an Insert call carries follow-ups.
func anyFollowUps(params []store.InsertParams) bool {
	for i := range params {
		if len(params[i].FollowUps) > 0 {
			return true
		}
	}
	return false
}

// finishRich is Finish for rows with results or Then jobs: one transaction
// applies the outcomes, then records the results and inserts the Then
// jobs of the rows that applied.
func (s *Store) finishRich(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	var ok []bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		ok, err = s.finishIn(ctx, tx, params)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ok, nil
}

// finishIn applies params on tx: the outcomes (through Finish), then, for
// the rows whose lease matched, their results and, for successes, their
// Then jobs (Parent set to the job, no unique key, an ID that exists
// already skipped).
func (s *Store) finishIn(ctx context.Context, tx pgx.Tx, params []store.FinishParams) ([]bool, error) {
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: finish row %d: %w", i, err)
		}
	}
	plain := make([]store.FinishParams, len(params))
	for i, p := range params {
		p.Result, p.Then = nil, nil
		plain[i] = p
	}
	if anyRich(params) {
		// finishExtras writes to the rows next: they stay in jobs.
		ctx = context.WithValue(ctx, keepRowsKey{}, true)
	}
	ok, err := s.Finish(withConn(ctx, tx), plain)
	if err != nil {
		return nil, err
	}
	if err := s.finishExtras(ctx, tx, params, ok); err != nil {
		return nil, err
	}
	return ok, nil
}

// finishExtras writes, on tx, what params bring besides their outcomes,
// for the rows whose outcome applied (ok[i]): their results and, for
// successes, their Then jobs. It must run in the transaction that applied
// the outcomes, after them: any other path that applies outcomes (a flow
// controlled finish, for one) calls it the same way.
func (s *Store) finishExtras(ctx context.Context, tx pgx.Tx, params []store.FinishParams, ok []bool) error {
	var (
		resultIDs [][16]byte
		results   [][]byte
		thenTmpl  [][]byte
		thenIDs   [][16]byte
		parents   [][16]byte
	)
	for i, p := range params {
		if !ok[i] {
			continue
		}
		if p.Result != nil {
			resultIDs, results = append(resultIDs, p.Lease.ID), append(results, p.Result)
		}
		if p.Outcome != store.OutcomeSucceeded {
			continue
		}
		for j := range p.Then {
			t := p.Then[j]
			t.UniqueKey = ""
			b, err := encodeTemplate(&t)
			if err != nil {
				return fmt.Errorf("pgstore: finish job %s: then %d: %w", p.Lease.ID, j, err)
			}
			thenTmpl, thenIDs, parents = append(thenTmpl, b), append(thenIDs, t.ID), append(parents, p.Lease.ID)
		}
	}
	if len(results) > 0 {
		// The rows are locked by the outcome written above: no other
		// transaction can have changed them since.
		_, err := tx.Exec(ctx, s.sql(resultsSQL), resultIDs, results)
		if err != nil {
			return fmt.Errorf("pgstore: finish: record results: %w", invalidData(err))
		}
	}
	if len(thenTmpl) > 0 {
		_, err := tx.Exec(ctx, s.sql(`SELECT {schema}.ax_insert_template(t, id, parent, NULL, false, $4)
FROM unnest($1::json[], $2::uuid[], $3::uuid[]) AS u(t, id, parent)`), thenTmpl, thenIDs, parents, s.channel)
		if err != nil {
			return fmt.Errorf("pgstore: finish: insert Then jobs: %w", invalidData(err))
		}
	}
	return nil
}

// resultsSQL records the results ($2) of the jobs whose IDs are $1;
// followUpsSQL attaches follow-up templates likewise.
var (
	resultsSQL   = updateByProbeSQL("", "unnest($1::uuid[], $2::json[]) AS x(id, v)", "", "result = x.v", "")
	followUpsSQL = updateByProbeSQL("", "unnest($1::uuid[], $2::json[]) AS x(id, v)", "", "follow_ups = x.v", "")
)

// attachFollowUps writes the follow-up templates of the inserted rows of
// params (res says which were inserted).
func (s *Store) attachFollowUps(ctx context.Context, tx pgx.Tx, params []store.InsertParams, res []store.InsertResult) error {
	var (
		ids [][16]byte
		fus [][]byte
	)
	for i := range params {
		if len(params[i].FollowUps) == 0 || res[i].Duplicate {
			continue
		}
		b, err := encodeFollowUps(params[i].FollowUps)
		if err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		ids, fus = append(ids, params[i].ID), append(fus, b)
	}
	if len(ids) == 0 {
		return nil
	}
	// The rows are this transaction's own, not yet committed.
	_, err := tx.Exec(ctx, s.sql(followUpsSQL), ids, fus)
	if err != nil {
		return fmt.Errorf("attach follow-ups: %w", err)
	}
	return nil
}
