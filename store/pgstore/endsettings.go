package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// genericPlan makes the statements that follow it in its transaction run
// on their generic plans. PostgreSQL picks between a prepared statement's
// generic plan and a custom plan made for each execution's values by
// comparing their estimated costs, and for the claim and finish statements
// the generic plan's estimate, made without the values, comes out above
// the custom ones': it then plans the whole statement again on every
// execution. Claims were planned on every execution (axbench throughput:
// 0 generic of about 900 claims per 50,000 jobs, 1.3–1.7 ms of server time
// per claim, about as much as running it), finishes 15–45 % of the time
// at 100 workers (1.4 ms each; planning was 18 % of the server's CPU in
// one profile). Their generic plans are the ones TestGenericPlansAreLinear
// checks: probes by index, linear in the rows.
const genericPlan = `set_config('plan_cache_mode', 'force_generic_plan', true)`

// endSettings returns the settings of a transaction that writes outcomes
// (Finish, FinishFlow), as set_config calls each after ", ", to append to
// a SELECT list: generic plans, and with WithAsyncClaimsAndOutcomes no
// wait for the WAL flush at commit. None in a caller's transaction
// (CompleteTx): its plans and its durability stay the caller's.
func (s *Store) endSettings(ctx context.Context) string {
	switch {
	case ctx.Value(userTxKey{}) != nil:
		return ""
	case s.opts.asyncCommits:
		return `, ` + genericPlan + `, ` + syncOff // asynccommit.go
	default:
		return `, ` + genericPlan
	}
}

// queryEnd runs a statement that writes outcomes on q, after the
// settings statement (jitOffSQL and endSettings) in the same transaction
// (one round trip: on the pool, the two share the batch's implicit
// transaction); in a caller's transaction, alone. done closes what
// queryEnd opened and returns the first error: the caller's reading the
// rows (err), the settings', or the commit's.
func (s *Store) queryEnd(ctx context.Context, q querier, sql string, args ...any) (rows pgx.Rows, done func(err error) error) {
	settings := s.endSettings(ctx)
	if settings == "" {
		rows, _ = q.Query(ctx, sql, args...)
		return rows, func(err error) error { return err }
	}
	b := &pgx.Batch{}
	b.Queue(jitOffSQL + settings)
	b.Queue(sql, args...)
	br := q.SendBatch(ctx, b)
	_, setErr := br.Exec()
	rows, _ = br.Query()
	return rows, func(err error) error {
		rows.Close()
		closeErr := br.Close()
		switch {
		case setErr != nil:
			return fmt.Errorf("settings: %w", setErr)
		case err != nil:
			return err
		default:
			return closeErr
		}
	}
}
