package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// A caller's transaction costs one connection (see the package doc):
// InsertTx, InsertBatchTx and CompleteTx run every statement of theirs on
// the caller's tx (their context carries it: withConn), and the reads the
// ax package makes while such a transaction is open (KindDefaults,
// ListNodes) run on it too, through the context InTx returns.

var _ store.TxReader[pgx.Tx] = (*Store)(nil)

// InTx returns ctx carrying tx, the caller's open transaction: the Store's
// calls made with it that read (KindDefaults, ListNodes, and those that
// take a tx themselves) run on tx instead of taking a second connection
// from the pool, which a pool held by open transactions would never give.
// The ax package calls it for ScheduleTx, ScheduleBatchTx, CompleteTx and
// their generic forms; see store.TxReader. tx must stay open while those
// calls run, and must not be used concurrently meanwhile. A read on tx
// sees tx's snapshot, and a failed one aborts tx, as any statement of it.
func (s *Store) InTx(ctx context.Context, tx pgx.Tx) context.Context {
	return withConn(ctx, tx)
}
