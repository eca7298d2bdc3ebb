package ax

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
)

// Transactions of any store. ScheduleTx, CompleteTx and ScheduleBatchTx
// take a pgx.Tx, for pgstore; these generic forms take the transaction
// type of whatever store the Scheduler has — a pgx.Tx for pgstore, a
// *sql.Tx for sqlitestore — found by the store's InsertTx, CompleteTx and
// InsertBatchTx methods.

// ScheduleTxOf schedules a job inside tx, a transaction of the Scheduler's
// store, so that the job exists only if tx commits. It is ScheduleTx for
// any store whose InsertTx takes a Tx; others return ErrTxUnsupported.
func ScheduleTxOf[Tx any](ctx context.Context, s *Scheduler, tx Tx, kind string, payload any, opts ...ScheduleOption) (ScheduleResult, error) {
	ti, ok := s.store.(interface {
		InsertTx(context.Context, Tx, []store.InsertParams) ([]store.InsertResult, error)
	})
	if !ok {
		return ScheduleResult{}, fmt.Errorf("schedule %q in tx: store %T takes no %T: %w", kind, s.store, tx, ErrTxUnsupported)
	}
	return s.scheduleTx(ctx, kind, payload, opts, func(params []store.InsertParams) ([]store.InsertResult, error) {
		return ti.InsertTx(ctx, tx, params)
	})
}

// CompleteTxOf is CompleteTx for any store whose CompleteTx takes a Tx:
// called by a handler with its own context, it marks the job succeeded
// inside tx, fenced by the attempt's lease.
func CompleteTxOf[Tx any](ctx context.Context, s *Scheduler, tx Tx) error {
	tc, ok := s.store.(interface {
		CompleteTx(context.Context, Tx, store.FinishParams) (bool, error)
	})
	if !ok {
		return fmt.Errorf("complete in tx: store %T takes no %T: %w", s.store, tx, ErrTxUnsupported)
	}
	return s.completeTx(ctx, func(p store.FinishParams) (bool, error) { return tc.CompleteTx(ctx, tx, p) })
}

// ScheduleBatchTxOf is ScheduleBatchTx for any store whose InsertBatchTx
// takes a Tx (a *sql.Tx for sqlitestore): the batch exists only if tx
// commits. Stores that take no Tx return ErrTxUnsupported.
func ScheduleBatchTxOf[Tx any](ctx context.Context, s *Scheduler, tx Tx, b Batch) (*BatchResult, error) {
	ti, ok := s.store.(interface {
		InsertBatchTx(context.Context, Tx, *store.BatchParams) (*store.BatchResult, error)
	})
	if !ok {
		return nil, fmt.Errorf("schedule batch in tx: store %T takes no %T: %w", s.store, tx, ErrTxUnsupported)
	}
	return s.scheduleBatch(ctx, b, func(_ store.BatchStore, p *store.BatchParams) (*store.BatchResult, error) {
		return ti.InsertBatchTx(ctx, tx, p)
	})
}
