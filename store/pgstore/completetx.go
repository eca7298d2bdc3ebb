package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// The methods the ax package finds by type assertion (ax.CompleteTxOf,
// Scheduler.ScheduleBatchTx): a change of signature here must fail to
// compile, not make those calls return ErrTxUnsupported.
var _ interface {
	CompleteTx(context.Context, pgx.Tx, store.FinishParams) (bool, error)
	InsertTx(context.Context, pgx.Tx, []store.InsertParams) ([]store.InsertResult, error)
	InsertBatchTx(context.Context, pgx.Tx, *store.BatchParams) (*store.BatchResult, error)
} = (*Store)(nil)

// CompleteTx applies one attempt's outcome (normally OutcomeSucceeded, with
// its Result and Then jobs) inside the caller's transaction tx, so that the
// job's end and the caller's own writes in tx commit or roll back
// together: ax.CompleteTx calls it for a handler that finishes its job in
// its business transaction.
//
// The write is fenced by the lease, as Finish is: it applies only while the
// job is running under params.Lease.Token, and then returns true. It
// returns false, changing nothing, when the lease is no longer held (the
// job was rescued and perhaps claimed again by another host): the caller
// must roll tx back, so that a stale owner's writes are never committed.
//
// The job's row stays locked until tx ends. Nothing of the scheduler's
// waits for it: the host's lease extensions skip the row (the lease is
// held, not lost, but its expiry is not pushed while tx is open), rescues
// skip it, and a Finish writes its other rows first (only a Finish of this
// very job waits). Once tx commits, extensions report the lease finished
// by its holder, not lost; if tx rolls back, the next extension pushes the
// lease again, unless it expired meanwhile and a rescue took the job: so
// keep tx open after the call for less than the lease. A batch child's
// end also locks its batch's row until tx ends, and the ends of its
// siblings (Finish, on any host) wait for it. Follow-ups and batch
// progress that the job's end sets off are written in tx too. Listeners hear of inserted jobs when tx commits. On error, tx is
// left for the caller to roll back (a failed statement aborts a PostgreSQL
// transaction); params that FinishParams.Validate refuses fail with an
// error wrapping store.ErrInvalidParams before anything is sent.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, params store.FinishParams) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	if tx == nil {
		return false, fmt.Errorf("pgstore: complete job %s in tx: nil transaction: %w", params.Lease.ID, store.ErrInvalidParams)
	}
	// A user's transaction: breaker verdicts are recorded, not fed
	// (finishflow.go, recordVerdicts), so that it holds no flows row;
	// every read on tx, none on a second connection (onetx.go).
	ok, err := s.finishIn(context.WithValue(withConn(ctx, tx), userTxKey{}, true), tx, []store.FinishParams{params})
	if err != nil {
		return false, err // says "pgstore: finish", the job and the step
	}
	return ok[0], nil
}
