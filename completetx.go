package ax

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// CompleteTx marks the running job succeeded inside the handler's own
// PostgreSQL transaction tx, with the result recorded so far and the jobs
// added with Then: the job's success and the handler's writes commit or
// roll back together, so the handler's database effects happen once even
// across crashes and lost leases. ctx must be the handler's context.
//
// The write is fenced by the attempt's lease: when another host has taken
// the job over (this host stalled, its lease was rescued), CompleteTx
// returns an error wrapping ErrLeaseLost and the handler must roll tx back
// and return. After a successful CompleteTx the handler commits tx and
// returns the commit's error (nil when it committed): if tx did not commit
// after all, the job is retried, never marked succeeded without its
// writes.
//
// On PostgreSQL the job's row stays locked from CompleteTx until tx ends.
// The host does not wait on it: its lease extensions skip the row (the
// lease counts as held; its expiry is not pushed while tx is open, and no
// other host can rescue a locked row), and its other jobs' leases and
// outcomes go through. After the commit, an extension that runs before the
// handler returns sees the job finished under this attempt's own lease and
// does not report it lost. A transaction rolled back after CompleteTx
// leaves the job running; it stays this host's if the next extension comes
// before the lease expires, so keep tx open after CompleteTx for less than
// LeaseDuration. The end of a batch child also locks its batch's row until
// tx ends, and the ends of its siblings wait for it.
//
// The kinds of the jobs added with Then are checked here, on tx (with
// Config.RefuseUnknownKinds), and their stored defaults read on tx: tx
// is the only connection the call uses (see tx.go).
//
// Errors: ErrNotInHandler, ErrTxUnsupported (a store without transactions,
// such as memstore; the error is permanent, so the job is not retried, and
// the CompletesInTx option refuses such a handler at registration),
// ErrLeaseLost, ErrUnknownKind (a Then job's kind, with
// Config.RefuseUnknownKinds), or the store's error. For other stores' transactions, see
// CompleteTxOf.
func (s *Scheduler) CompleteTx(ctx context.Context, tx pgx.Tx) error {
	return CompleteTxOf(ctx, s, tx)
}

// completeTx ends the handler's attempt as succeeded with complete, which
// writes inside the caller's transaction.
func (s *Scheduler) completeTx(ctx context.Context, complete func(store.FinishParams) (bool, error)) error {
	x := extrasFrom(ctx)
	if x == nil {
		return fmt.Errorf("complete in tx: %w", ErrNotInHandler)
	}
	x.mu.Lock()
	if x.resultErr != nil {
		err := x.resultErr
		x.mu.Unlock()
		return fmt.Errorf("complete in tx: %w", err)
	}
	p := store.FinishParams{Lease: x.a.lease, Outcome: store.OutcomeSucceeded, Result: x.result, Then: x.then}
	x.mu.Unlock()
	then, err := s.resolveThen(ctx, p.Then) // on tx (inTx): result.go
	if err != nil {
		return fmt.Errorf("complete job %s in tx: %w", x.a.lease.ID, err)
	}
	p.Then = then
	applied, err := complete(p)
	if err != nil {
		return fmt.Errorf("complete job %s in tx: %w", x.a.lease.ID, err)
	}
	if !applied {
		return fmt.Errorf("complete job %s in tx: %w", x.a.lease.ID, ErrLeaseLost)
	}
	x.mu.Lock()
	x.completedTx = true
	x.mu.Unlock()
	return nil
}
