package ax

import (
	"context"
	"fmt"
	"reflect"

	"github.com/axsched/ax/store"
)

// Transactions of any store. ScheduleTx, ScheduleManyTx, CompleteTx and
// ScheduleBatchTx take a pgx.Tx, for pgstore; these generic forms (and
// EnqueueTx, EnqueueManyTx) take the transaction type of whatever store
// the Scheduler has — a pgx.Tx for pgstore, a *sql.Tx for sqlitestore —
// found by the store's InsertTx, CompleteTx and InsertBatchTx methods. A
// store without the method for tx's type fails the call with
// ErrTxUnsupported before anything is written. In a handler that error
// of CompleteTxOf (and CompleteTx) is permanent: the job fails at once
// rather than redoing the handler's other effects on every retry. A
// handler declares its type with the CompletesInTx option, and Handle
// refuses it when the store's CompleteTx does not take that type, before
// any job runs.
//
// A caller's transaction costs exactly one connection, the one it holds:
// every store call these make while it is open (the kinds' defaults, the
// cluster's kinds for Config.RefuseUnknownKinds, the insert or completion
// itself) runs on tx when the store reads on a caller's transaction
// (store.TxReader, as pgstore does), never on a second connection of the
// pool, which a pool held by request transactions would never free. Then
// makes no store call: what it cannot check without one (a kind's stored
// defaults, a kind this host's copy of the cluster's kinds does not
// answer for) is checked with the outcome, on CompleteTx's transaction.

// ScheduleTxOf schedules a job inside tx, a transaction of the Scheduler's
// store, so that the job exists only if tx commits. It is ScheduleTx for
// any store whose InsertTx takes a Tx; others return ErrTxUnsupported.
func ScheduleTxOf[Tx any](ctx context.Context, s *Scheduler, tx Tx, kind string, payload any, opts ...ScheduleOption) (ScheduleResult, error) {
	what := fmt.Sprintf("schedule %q in tx", kind)
	ctx = inTx(ctx, s, tx)
	insert, err := txInsert(ctx, s, tx)
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("%s: %w", what, err)
	}
	res, err := s.scheduleTx(ctx, what, []Request{{Kind: kind, Payload: payload, Options: opts}}, insert)
	if err != nil {
		return ScheduleResult{}, err
	}
	return res[0], nil
}

// ScheduleManyTxOf schedules several jobs inside tx, a transaction of the
// Scheduler's store, in one store call: they all exist if tx commits
// (duplicates reported per job), none if it rolls back, and on error
// nothing was written for them (roll tx back all the same: a failed
// statement aborts a PostgreSQL transaction). Results are in the order of
// reqs. It is ScheduleManyTx for any store whose InsertTx takes a Tx (a
// *sql.Tx of its file for sqlitestore); others return ErrTxUnsupported
// before anything is written. Other errors are ScheduleMany's.
func ScheduleManyTxOf[Tx any](ctx context.Context, s *Scheduler, tx Tx, reqs []Request) ([]ScheduleResult, error) {
	what := fmt.Sprintf("schedule %d job(s) in tx", len(reqs))
	ctx = inTx(ctx, s, tx)
	insert, err := txInsert(ctx, s, tx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s.scheduleTx(ctx, what, reqs, insert)
}

// inTx returns ctx for the store calls made while the caller's
// transaction tx is open: carrying tx when the store can read on it
// (store.TxReader), so that they never wait for a second connection.
func inTx[Tx any](ctx context.Context, s *Scheduler, tx Tx) context.Context {
	if r, ok := s.store.(store.TxReader[Tx]); ok {
		return r.InTx(ctx, tx)
	}
	return ctx
}

// txInsert returns the insert of the Scheduler's store into tx, or an
// error wrapping ErrTxUnsupported when its InsertTx takes no Tx.
func txInsert[Tx any](ctx context.Context, s *Scheduler, tx Tx) (func([]store.InsertParams) ([]store.InsertResult, error), error) {
	ti, ok := s.store.(interface {
		InsertTx(context.Context, Tx, []store.InsertParams) ([]store.InsertResult, error)
	})
	if !ok {
		return nil, fmt.Errorf("store %T takes no %s: %w", s.store, txTypeName[Tx](), ErrTxUnsupported)
	}
	return func(params []store.InsertParams) ([]store.InsertResult, error) {
		return ti.InsertTx(ctx, tx, params)
	}, nil
}

// txTypeName names the transaction type Tx (a nil pgx.Tx's %T is
// "<nil>").
func txTypeName[Tx any]() string {
	return reflect.TypeFor[Tx]().String()
}

// CompleteTxOf is CompleteTx for any store whose CompleteTx takes a Tx:
// called by a handler with its own context, it marks the job succeeded
// inside tx, fenced by the attempt's lease.
//
// When the store takes no Tx, the error wraps ErrTxUnsupported and is
// permanent (see Permanent): a handler that returns it, wrapped with %w,
// fails its job at once instead of retrying it, since every retry would
// fail the same way after redoing the handler's other effects. Declare
// the type at registration with CompletesInTx to be refused then instead.
func CompleteTxOf[Tx any](ctx context.Context, s *Scheduler, tx Tx) error {
	tc, err := txCompleterOf[Tx](s.store)
	if err != nil {
		return Permanent(fmt.Errorf("complete in tx: %w", err))
	}
	ctx = inTx(ctx, s, tx)
	return s.completeTx(ctx, func(p store.FinishParams) (bool, error) { return tc.CompleteTx(ctx, tx, p) })
}

// txCompleter is a store whose CompleteTx takes a Tx.
type txCompleter[Tx any] interface {
	CompleteTx(context.Context, Tx, store.FinishParams) (bool, error)
}

// txCompleterOf returns st as a txCompleter of Tx, or an error wrapping
// ErrTxUnsupported that names st's type and Tx.
func txCompleterOf[Tx any](st store.Store) (txCompleter[Tx], error) {
	tc, ok := st.(txCompleter[Tx])
	if !ok {
		return nil, fmt.Errorf("store %T takes no %s in CompleteTx: %w", st, txTypeName[Tx](), ErrTxUnsupported)
	}
	return tc, nil
}

// ScheduleBatchTxOf is ScheduleBatchTx for any store whose InsertBatchTx
// takes a Tx (a *sql.Tx for sqlitestore): the batch exists only if tx
// commits. Stores that take no Tx return ErrTxUnsupported.
func ScheduleBatchTxOf[Tx any](ctx context.Context, s *Scheduler, tx Tx, b Batch) (*BatchResult, error) {
	ti, ok := s.store.(interface {
		InsertBatchTx(context.Context, Tx, *store.BatchParams) (*store.BatchResult, error)
	})
	if !ok {
		return nil, fmt.Errorf("schedule batch in tx: store %T takes no %s: %w", s.store, txTypeName[Tx](), ErrTxUnsupported)
	}
	ctx = inTx(ctx, s, tx)
	return s.scheduleBatch(ctx, b, func(_ store.BatchStore, p *store.BatchParams) (*store.BatchResult, error) {
		return ti.InsertBatchTx(ctx, tx, p)
	})
}
